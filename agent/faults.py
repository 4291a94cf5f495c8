"""Fault points for the reliability tests (tests/reliability): inert unless STEER_FAULT is set.

STEER_FAULT=kill:NAME       SIGKILL this process when it reaches the point NAME (`commit:object`,
                            `commit:attempt-ref`, `commit:refs`, `append:<event type>`; an
                            append point first writes half of the event's line, as a crash would)
STEER_FAULT=disk-full:PATH  artifact writes fail with ENOSPC while the file PATH exists

Read once at import: a running agent cannot be switched into a fault by its environment later.
"""
from __future__ import annotations

import errno
import os
import signal

SPEC = os.environ.get("STEER_FAULT", "")


def armed(name: str) -> bool:
    return SPEC == f"kill:{name}"


def point(name: str) -> None:
    """Die here, as `kill -9` would, if this point is armed."""
    if armed(name):
        os.kill(os.getpid(), signal.SIGKILL)


def disk_full() -> None:
    """Raise ENOSPC, as a full disk would, while the armed flag file exists."""
    if SPEC.startswith("disk-full:") and os.path.exists(SPEC[len("disk-full:"):]):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
