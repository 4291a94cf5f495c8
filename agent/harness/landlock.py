"""Landlock (Linux >= 5.13): the worker confines its own writes before importing a candidate.

After `restrict_writes(dirs)`, the process and its children can create, change or delete
files only beneath `dirs` (plus /dev, for the GPU and /dev/shm); reads are not restricted.
Where the kernel supports it, the candidate also loses TCP bind/connect and the right to send
signals to processes outside the sandbox (so it cannot kill the agent). Landlock needs no
privileges and binds root too. Without kernel support nothing changes and the caller is told.
"""
from __future__ import annotations

import ctypes
import os
import platform

_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_PR_SET_NO_NEW_PRIVS = 38
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE = (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)  # char dir reg sock fifo blk sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """Landlock ABI the kernel offers; 0 when unavailable."""
    nums = _SYS.get(platform.machine())
    if nums is None:
        return 0
    version = _libc().syscall(nums[0], None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))


def restrict_writes(writable: list[str]) -> str:
    """Confine this process; returns a short description of what was applied (or why not)."""
    abi = abi_version()
    if abi < 1:
        return "landlock unavailable: writes are not confined"
    create, add_rule, restrict = _SYS[platform.machine()]
    libc = _libc()
    fs = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE
    if abi >= 2:
        fs |= _REFER
    if abi >= 3:
        fs |= _TRUNCATE
    attr = _RulesetAttr(handled_access_fs=fs)
    size = 8
    if abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL
        size = 24
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock ruleset failed: {os.strerror(ctypes.get_errno())}"
    try:
        for path in list(dict.fromkeys(writable + ["/dev"])):
            if not os.path.isdir(path):
                continue
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY)
            try:
                rule = _PathBeneathAttr(allowed_access=fs, parent_fd=fd)
                if libc.syscall(add_rule, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    return f"landlock rule for {path} failed: {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"no_new_privs failed: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"landlock restrict failed: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    extras = (", no TCP" if abi >= 4 else "") + (", no signals outside" if abi >= 6 else "")
    return f"landlock abi {abi}: writes confined to the sandbox{extras}"
