""""Since you last looked": what happened after this user's previous view of a session.

The last seen `seq` per session is kept per user under ~/.local/state/steer/ (never in the
session directory, which belongs to the agent); the digest is built while events are folded.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent import events as ev
from agent.state import SessionState
from console import fmt


def state_dir() -> Path:
    """Where per-user console state lives: $STEER_STATE_DIR, else $XDG_STATE_HOME/steer, else ~/.local/state/steer."""
    if os.environ.get("STEER_STATE_DIR"):
        return Path(os.environ["STEER_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "steer"


class SeenStore:
    """{absolute session dir: {"seq": last seen seq, "ts": when}} in one small JSON file."""

    def __init__(self, path: Path | None = None):
        self.path = path or state_dir() / "seen.json"

    def _load(self) -> dict[str, dict[str, float]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def last_seen(self, session_dir: Path) -> int | None:
        entry = self._load().get(str(session_dir.resolve()))
        try:
            return int(entry["seq"]) if isinstance(entry, dict) else None
        except (KeyError, TypeError, ValueError):
            return None

    def save(self, session_dir: Path, seq: int) -> None:
        """Best effort: a console that cannot write its own state still works."""
        try:
            data = self._load()
            key = str(session_dir.resolve())
            if int(data.get(key, {}).get("seq", 0) or 0) >= seq and key in data:
                return
            data[key] = {"seq": seq, "ts": time.time()}
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
        except OSError:
            pass


@dataclass
class Digest:
    """What happened after `since_seq`: counts plus the notable lines, oldest first."""
    since_seq: int
    since_ts: float = 0.0
    attempts: int = 0
    accepted: int = 0
    failed: int = 0
    new_bests: list[str] = field(default_factory=list)
    plateaus: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    steering: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)   # branch changes, stops, budgets, resumes

    @property
    def empty(self) -> bool:
        return not (self.attempts or self.new_bests or self.plateaus or self.errors or self.steering
                    or self.other)

    def feed(self, e: ev.Event, state: SessionState, new_best: bool) -> None:
        """Called after `state` applied `e`; only events after since_seq count."""
        if e.seq <= self.since_seq:
            self.since_ts = max(self.since_ts, e.ts)
            return
        at = f"{fmt.clock(e.ts)} "
        if isinstance(e, ev.AttemptCommitted):
            self.attempts += 1
            self.accepted += e.verdict == "accepted"
            self.failed += e.verdict == "failed"
            if new_best:
                sp = state.baseline_us / e.geomean_us if state.baseline_us and e.geomean_us else None
                self.new_bests.append(f"{at}new best {fmt.us(e.geomean_us)} µs ({fmt.speedup(sp)}) "
                                      f"on {e.branch} in #{e.iteration}: {fmt.short(e.summary, 60)}")
        elif isinstance(e, ev.PlateauDetected):
            self.plateaus.append(f"{at}{e.branch} plateaued: {e.attempts_since_gain} attempts, "
                                 f"{e.minutes_since_gain:.0f} min without a gain")
        elif isinstance(e, ev.ErrorEvent):
            self.errors.append(f"{at}{'fatal ' if e.fatal else ''}error in {e.where}: {fmt.short(e.message, 80)}")
        elif isinstance(e, ev.SteeringApplied):
            s = state.steering.get(e.id)
            text = fmt.short(s.text, 50) if s else e.id
            where = f" in #{e.iteration}" if e.iteration is not None else ""
            self.steering.append(f"{at}used{where}: {text}")
        elif isinstance(e, ev.SteeringRejected):
            s = state.steering.get(e.id)
            self.steering.append(f"{at}rejected: {fmt.short(s.text if s else e.id, 40)} ({e.reason})")
        elif isinstance(e, ev.BranchCreated):
            self.other.append(f"{at}branch {e.branch} created ({e.source or e.family})")
        elif isinstance(e, ev.BranchStateChanged):
            self.other.append(f"{at}branch {e.branch} {e.state}" + (f": {e.reason}" if e.reason else ""))
        elif isinstance(e, ev.AgentStopped):
            self.other.append(f"{at}agent stopped ({e.reason})" + (f": {e.detail}" if e.detail else ""))
        elif isinstance(e, ev.SessionResumed):
            self.other.append(f"{at}agent resumed at #{e.next_iteration} ({e.mode})")
        elif isinstance(e, ev.BudgetReached):
            self.other.append(f"{at}budget reached: {e.kind} {e.value:g}/{e.limit:g}")

    def lines(self) -> list[str]:
        """The digest as text lines, the summary first."""
        out = [f"{self.attempts} attempts ({self.accepted} accepted, {self.failed} failed)"
               + (f" since {fmt.date_time(self.since_ts)}" if self.since_ts else "")]
        for title, items in (("New bests", self.new_bests), ("Plateaus", self.plateaus),
                             ("Errors", self.errors), ("Steering", self.steering), ("Other", self.other)):
            if items:
                out.append("")
                out.append(f"{title} ({len(items)})")
                shown = items[-12:]
                if len(items) > len(shown):
                    out.append(f"  … {len(items) - len(shown)} earlier")
                out.extend(f"  {line}" for line in shown)
        return out
