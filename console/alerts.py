"""Alerts: the few events worth a terminal bell and a notification (a new best, a plateau, a high noise floor)."""
from __future__ import annotations

from dataclasses import dataclass

from agent import events as ev
from agent.state import HIGH_NOISE_FLOOR, SessionState
from console import fmt


@dataclass(frozen=True)
class Alert:
    title: str
    message: str
    severity: str = "information"   # information | warning | error (Textual's notify severities)


def alert_for(e: ev.Event, state: SessionState, new_best: bool) -> Alert | None:
    """The alert raised by `e` (already applied to `state`), if any."""
    if isinstance(e, ev.AttemptCommitted) and new_best:
        sp = state.baseline_us / e.geomean_us if state.baseline_us and e.geomean_us else None
        return Alert("New best", f"{fmt.us(e.geomean_us)} µs ({fmt.speedup(sp)}) on {e.branch} in #{e.iteration}")
    if isinstance(e, ev.PlateauDetected):
        return Alert("Plateau", f"{e.branch}: {e.attempts_since_gain} attempts without a gain", "warning")
    if isinstance(e, ev.NoiseMeasured) and e.floor > HIGH_NOISE_FLOOR:
        return Alert("High noise floor", f"timings of the same code differed by {100 * e.floor:.1f}% at setup: smaller "
                                         f"gains will be rejected (/noise 2% sets the floor)", "warning")
    if isinstance(e, ev.ErrorEvent) and e.fatal:
        return Alert("Agent error", f"{e.where}: {fmt.short(e.message, 120)}", "error")
    return None
