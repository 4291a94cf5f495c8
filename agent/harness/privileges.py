"""Keep the candidate away from the agent's secrets: /proc/<agent>/environ and /proc/<agent>/mem.

A candidate runs as the same user as the agent, and the kernel lets a process read the
environment and memory of another process of its user (the agent holds OPENAI_API_KEY).
Two halves close that:
- `protect_self()` (the agent, before it starts a worker): mark the process non-dumpable,
  so only a process with CAP_SYS_PTRACE may read its /proc files or attach to it;
- `drop_root_capabilities()` (the worker, as root, before any thread exists): give up every
  capability, for good and across exec, so a root candidate has no CAP_SYS_PTRACE either
  (nor CAP_SYS_RESOURCE to lift its rlimits, nor CAP_KILL).
"""
from __future__ import annotations

import ctypes
import os

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS off, each with its lock bit: root gains nothing on exec
_SECUREBITS = 0b101111
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def protect_self() -> bool:
    """Make this process non-dumpable (idempotent); False where the platform has no prctl."""
    try:
        return _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (AttributeError, OSError):
        return False


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 63


def drop_root_capabilities() -> str:
    """As root: drop every capability (bounding set, ambient, permitted). A note for the sandbox line."""
    if os.geteuid() != 0:
        return ""
    try:
        libc = _libc()
        for cap in range(_last_cap() + 1):
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
        libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0)
        header = _CapHeader(version=_CAP_VERSION_3, pid=0)
        data = (_CapData * 2)()
        if libc.capset(ctypes.byref(header), data) != 0:
            return f"root capabilities kept: capset failed ({os.strerror(ctypes.get_errno())})"
    except (AttributeError, OSError) as exc:
        return f"root capabilities kept: {exc}"
    return "root capabilities dropped"
