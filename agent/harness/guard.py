"""What a candidate must leave as it found it; checked after import and after every stage.

The candidate runs in the worker's own process, so it can reach everything the harness uses.
Before it is imported, the guard remembers the identity of every name in the namespaces that
decide a result: the task's modules (the checker, its tolerances and helpers), the harness's
modules and classes, torch's main namespaces and tensor methods, builtins and the few stdlib
modules the harness calls after the import (json, hmac, math, random, threading, time). For
Python functions it also remembers the code and defaults, which can be swapped in place. A
torch function/dispatch mode or a trace hook left active counts as tampering too.

What it cannot see: a candidate that rewrites memory (ctypes) or reaches the harness's
private objects (gc) to call or replace them. docs/reliability.md states this limit.
"""
from __future__ import annotations

import builtins
import sys
import types
from typing import Any, Callable

import torch

# Replaced by torch itself: torch.compile wraps torch.manual_seed in dynamo's disable wrapper
# (torch 2.13). The reference draws its inputs from its own torch.Generator, not from this.
BENIGN = frozenset({"torch.manual_seed"})
# Python writes these into a module when a warning is issued from it.
VOLATILE_KEYS = frozenset({"__warningregistry__"})
SHOWN = 8    # names listed in the failure message


def _items(ns: Any) -> dict[str, Any]:
    return dict(ns.__dict__) if isinstance(ns, type) else dict(vars(ns))


def _parts(value: Any) -> tuple[Any, ...]:
    """The identities that make up a value: a function's code and defaults can change in place."""
    func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
    if isinstance(func, types.FunctionType):
        return (value, func.__code__, func.__defaults__, func.__kwdefaults__)
    return (value,)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class Guard:
    """`named`: getters whose result must keep its identity. `spaces`: label -> module or class whose
    names must keep theirs. In `closed` spaces a new name counts too where it changes a lookup: any
    new attribute of a class (it shadows an inherited one), a new module global named like a builtin."""

    def __init__(self, named: dict[str, Callable[[], Any]], spaces: dict[str, Any], closed: set[str]):
        self._getters = named
        self._original = {name: get() for name, get in named.items()}
        self._spaces = {label: (ns, {k: _parts(v) for k, v in _items(ns).items() if k not in VOLATILE_KEYS})
                        for label, ns in spaces.items()}
        self._closed = closed
        self._hooks = _hooks()

    def violations(self) -> list[str]:
        changed = []
        for name, get in self._getters.items():
            try:
                now = get()
            except Exception:  # noqa: BLE001 - a deleted attribute is a change too
                now = None
            if now is not self._original[name]:
                changed.append(name)
        for label, (ns, before) in self._spaces.items():
            now = {k: v for k, v in _items(ns).items() if k not in VOLATILE_KEYS}
            for key, parts in before.items():
                name = f"{label}.{key}"
                if name in BENIGN:
                    continue
                if key not in now:
                    changed.append(f"{name} (deleted)")
                elif not _same(_parts(now[key]), parts):
                    changed.append(name)
            if label in self._closed:
                shadows = (lambda k: True) if isinstance(ns, type) else (lambda k: k in _BUILTIN_NAMES)
                changed += [f"{label}.{key} (added)" for key in now if key not in before and shadows(key)]
        hooks = _hooks()
        for what, was in self._hooks.items():
            if hooks[what] is not was and hooks[what] != was:
                changed.append(f"{what} left active")
        return list(dict.fromkeys(changed))


_BUILTIN_NAMES = frozenset(vars(builtins))


def _hooks() -> dict[str, Any]:
    """Ways to intercept the checker's calls without replacing a name."""
    return {
        "a torch function mode": torch._C._len_torch_function_stack(),
        "a torch dispatch mode": torch._C._len_torch_dispatch_stack(),
        "a sys.settrace hook": sys.gettrace(),
        "a sys.setprofile hook": sys.getprofile(),
    }


def describe(changed: list[str], stage: str) -> str:
    shown = ", ".join(changed[:SHOWN]) + (f" and {len(changed) - SHOWN} more" if len(changed) > SHOWN else "")
    return f"candidate changed what the harness relies on: {shown} (seen after stage {stage})"
