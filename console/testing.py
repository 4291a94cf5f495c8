"""Helpers to drive SteerApp headless: for the console's tests, the tmux check and the benchmark."""
from __future__ import annotations

import time
from typing import Any, Callable

from textual.pilot import Pilot

FIXED_NOW = 1_764_010_000.0    # "now" for renders that must not depend on the clock


async def wait_for(pilot: Pilot[Any], predicate: Callable[[], object], timeout: float = 10.0,
                   what: str = "condition") -> None:
    """Let the app run until `predicate()` is true; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await pilot.pause(0.05)


async def settle(pilot: Pilot[Any], app: Any, timeout: float = 10.0) -> None:
    """Wait until the backlog is folded and painted, then for layout and timers to go quiet."""
    await wait_for(pilot, lambda: app.loaded, timeout, "the session to load")
    await pilot.pause(0.25)
    await pilot.pause()
