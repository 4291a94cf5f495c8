"""ConsoleModel: everything a console shows, derived only from events.jsonl and inbox.jsonl.

It wraps the agent's SessionState fold and adds what only a viewer needs: per-branch chart
series, steering markers, the activity lines, the queued prompts, the digest and alerts.
Each panel has a version number that goes up when its data changes, so a panel repaints
only when it has something new. Nothing here imports Textual.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from agent import events as ev
from agent.state import HIGH_NOISE_FLOOR, Attempt, SessionState
from agent.summary import floor_set_line, noise_line
from console import fmt
from console.alerts import Alert, alert_for
from console.digest import Digest

ASPECTS = ("header", "beam", "chart", "attempts", "steering", "activity")
ACTIVITY_LINES = 300

_SERIES_TYPES = frozenset({"branch_created", "attempt_committed", "steering_applied"})
_ASPECTS_OF: dict[str, tuple[str, ...]] = {
    "session_started": ("header", "beam", "chart"),
    "session_resumed": ("attempts",),       # an unfinished iteration is marked failed
    "agent_stopped": ("attempts",),         # ... and one still "running" is not any more
    "baseline_measured": ("header", "beam", "chart"),
    "noise_measured": ("header",),
    "noise_floor_set": ("header",),
    "branch_created": ("beam", "chart", "steering"),
    "branch_state_changed": ("beam",),
    "focus_changed": ("beam",),
    "plateau": ("beam",),
    "iteration_started": ("attempts",),
    "proposal_made": ("attempts",),
    "eval_finished": ("attempts",),
    "attempt_committed": ("beam", "chart", "attempts"),
    "steering_received": ("steering",),
    "steering_applied": ("steering", "chart"),
    "steering_rejected": ("steering",),
    "steering_dropped": ("steering",),
}


@dataclass
class Gain:
    iteration: int
    ts: float
    us: float


@dataclass
class BranchSeries:
    """Chart data of one branch, appended as attempts are committed (never recomputed)."""
    gains: list[Gain] = field(default_factory=list)
    it: list[int] = field(default_factory=list)        # measured attempts: iteration, time, µs
    ts: list[float] = field(default_factory=list)
    us: list[float] = field(default_factory=list)
    fail_it: list[int] = field(default_factory=list)   # failed attempts (no trustworthy µs)
    fail_ts: list[float] = field(default_factory=list)


@dataclass
class Mark:
    """A steering prompt on the chart, at the iteration that first used it."""
    id: str
    iteration: int
    ts: float
    text: str


@dataclass
class ActivityLine:
    ts: float
    text: str
    level: str = "info"    # info | good | warn | error


@dataclass
class SteeringRow:
    id: str
    text: str
    target: str | None
    scope: str
    status: str            # queued | seen | used | rejected | dropped
    detail: str            # "used in #412", "rejected: unknown branch", ...
    ts: float


class ConsoleModel:
    def __init__(self, since_seq: int | None = None) -> None:
        self.state = SessionState()
        self.inbox: dict[str, dict[str, Any]] = {}
        self.activity: deque[ActivityLine] = deque(maxlen=ACTIVITY_LINES)
        self.activity_total = 0
        self.versions = dict.fromkeys(ASPECTS, 0)
        self.series: dict[str, BranchSeries] = {}
        self.marks: list[Mark] = []
        self._marked: set[str] = set()
        self._recent: deque[ev.Event] = deque(maxlen=ACTIVITY_LINES)   # backlog events for the activity log
        self.digest = Digest(since_seq) if since_seq is not None else None
        self.live = False          # set once the backlog is folded: alerts only for new events
        self.gone = ""             # why the session can no longer be read, once it cannot
        self.holder: int | None = None   # pid holding agent.lock, None when no agent runs

    # -- input ------------------------------------------------------------------------------
    def bump(self, *aspects: str) -> None:
        for a in aspects:
            self.versions[a] += 1

    def apply(self, events: Iterable[ev.Event], backlog: bool = False) -> list[Alert]:
        """Fold new events; returns the alerts they raise (never for the backlog).

        `backlog`: a bulk load before the first paint; panel versions and activity lines are
        settled once by finish_backlog() instead of per event.
        """
        alerts: list[Alert] = []
        state, digest, recent = self.state, self.digest, self._recent
        for e in events:
            t = e.type
            if t == "unknown":
                continue
            committed = t == "attempt_committed"
            prev_best = state.best_us if committed else None
            state.apply(e)
            new_best = (committed and e.verdict == "accepted" and bool(e.geomean_us)  # type: ignore[attr-defined]
                        and (prev_best is None or e.geomean_us < prev_best))  # type: ignore[attr-defined]
            if t in _SERIES_TYPES:
                self._extend_series(e)
            if digest is not None:
                digest.feed(e, state, new_best)
            if backlog:
                if t != "eval_progress":
                    recent.append(e)
                continue
            self.bump("header", "activity", *_ASPECTS_OF.get(t, ()))
            line = activity_line(e, state)
            if line is not None:
                self.activity.append(line)
                self.activity_total += 1
            if self.live:
                alert = alert_for(e, state, new_best)
                if alert is not None:
                    alerts.append(alert)
        return alerts

    def finish_backlog(self) -> None:
        """After apply(..., backlog=True): the activity lines of the last events, every panel stale."""
        for e in self._recent:
            line = activity_line(e, self.state)
            if line is not None:
                self.activity.append(line)
                self.activity_total += 1
        self._recent.clear()
        self.bump(*ASPECTS)
        self.live = True

    def add_inbox(self, records: Iterable[dict[str, Any]]) -> None:
        added = False
        for rec in records:
            if rec.get("id") and rec["id"] not in self.inbox:
                self.inbox[rec["id"]] = rec
                added = True
        if added:
            self.bump("steering")

    def _extend_series(self, e: ev.Event) -> None:
        if isinstance(e, ev.BranchCreated):
            s = self.series.setdefault(e.branch, BranchSeries())
            if e.geomean_us:
                s.gains.append(Gain(self.state.iteration, e.ts, e.geomean_us))
        elif isinstance(e, ev.AttemptCommitted):
            s = self.series.setdefault(e.branch, BranchSeries())
            a = self.state.attempt(e.iteration)
            ts = a.ts if a is not None else e.ts
            if e.verdict == "failed" or not e.geomean_us:
                s.fail_it.append(e.iteration)
                s.fail_ts.append(ts)
            else:
                s.it.append(e.iteration)
                s.ts.append(ts)
                s.us.append(e.geomean_us)
            if e.verdict == "accepted" and e.geomean_us:
                s.gains.append(Gain(e.iteration, ts, e.geomean_us))
        elif isinstance(e, ev.SteeringApplied) and e.id not in self._marked:
            self._marked.add(e.id)
            s = self.state.steering.get(e.id)
            it = e.iteration if e.iteration is not None else self.state.iteration
            self.marks.append(Mark(e.id, it, e.ts, s.text if s else e.id))

    # -- views ------------------------------------------------------------------------------
    def attempt_rows(self, branch: str | None = None, limit: int = 500) -> tuple[list[Attempt], int]:
        """Newest first, at most `limit`, optionally one branch; and how many match in all."""
        attempts = self.state.attempts
        if branch is None:
            return attempts[::-1][:limit] if len(attempts) <= limit else attempts[-limit:][::-1], len(attempts)
        rows: list[Attempt] = []
        total = 0
        for a in reversed(attempts):
            if a.branch == branch:
                total += 1
                if len(rows) < limit:
                    rows.append(a)
        return rows, total

    def steering_rows(self, limit: int = 50) -> list[SteeringRow]:
        """Every prompt or command, newest first, with its state (queued → seen → used)."""
        rows: dict[str, SteeringRow] = {}
        for sid, rec in self.inbox.items():
            rows[sid] = SteeringRow(sid, str(rec.get("text", "")), rec.get("target"), str(rec.get("scope", "once")),
                                    "queued", "queued", float(rec.get("ts", 0) or 0))
        for sid, s in self.state.steering.items():
            ts = rows[sid].ts if sid in rows else s.received_ts
            rows[sid] = SteeringRow(sid, s.text, s.target, s.scope, s.status, steering_detail(s), ts)
        return sorted(rows.values(), key=lambda r: r.ts, reverse=True)[:limit]

    def prompt_history(self) -> list[str]:
        """Texts sent before (oldest first, no repeats), for the input's up/down history."""
        seen: dict[str, None] = {}
        for rec in sorted(self.inbox.values(), key=lambda r: float(r.get("ts", 0) or 0)):
            seen.pop(str(rec.get("text", "")), None)
            seen[str(rec.get("text", ""))] = None
        return [t for t in seen if t]

    def branch_names(self, live_only: bool = True) -> list[str]:
        return [b.name for b in self.state.branches.values() if b.live or not live_only]


def steering_detail(s: Any) -> str:
    if s.status == "used":
        if not s.used_in:
            return "done"
        if len(s.used_in) == 1:
            return f"used in #{s.used_in[0]}"
        return f"used {len(s.used_in)}× (last #{s.used_in[-1]})"
    if s.status == "rejected":
        return f"rejected: {s.reason}"
    return s.status


def activity_line(e: ev.Event, state: SessionState) -> ActivityLine | None:
    """The activity-log line for an event; None for the ones only the 'now' line shows."""
    t, text, level = e.ts, "", "info"
    if isinstance(e, ev.SessionStarted):
        text = f"session {e.name} started: task {e.task}, proposer {e.proposer}" + (
            f" ({e.model})" if e.model else "") + f", {e.device_name or e.device}"
    elif isinstance(e, ev.SessionResumed):
        text = f"agent resumed (pid {e.pid}, {e.mode}) at #{e.next_iteration}"
    elif isinstance(e, ev.AgentStopped):
        text, level = f"agent stopped: {e.reason}" + (f" ({e.detail})" if e.detail else ""), "warn"
    elif isinstance(e, ev.BaselineMeasured):
        text = f"baseline {fmt.us(e.geomean_us)} µs" if e.ok else f"baseline failed: {e.message}"
        level = "info" if e.ok else "error"
    elif isinstance(e, ev.NoiseMeasured):
        text = noise_line(e)
        level = "warn" if e.floor > HIGH_NOISE_FLOOR else "info"
    elif isinstance(e, ev.NoiseFloorSet):
        text = floor_set_line(e, state)
    elif isinstance(e, ev.BranchCreated):
        text = f"branch {e.branch} created ({e.source or e.family})" + (
            f" at {fmt.us(e.geomean_us)} µs" if e.geomean_us else "")
    elif isinstance(e, ev.BranchStateChanged):
        text = f"branch {e.branch} → {e.state}" + (f" ({e.reason})" if e.reason else "")
    elif isinstance(e, ev.FocusChanged):
        text = f"focus → {e.branch}" if e.branch else "focus cleared"
    elif isinstance(e, ev.PlateauDetected):
        text, level = f"{e.branch} plateau: {e.attempts_since_gain} attempts, {e.minutes_since_gain:.0f} min", "warn"
    elif isinstance(e, ev.IterationStarted):
        text = f"#{e.iteration} {e.branch}: proposing"
    elif isinstance(e, ev.ProposalMade):
        if e.ok:
            text = f"#{e.iteration} {e.branch}: proposed {fmt.short(e.summary, 70)}"
        else:
            text, level = f"#{e.iteration} {e.branch}: proposal failed: {e.error}", "error"
    elif isinstance(e, ev.EvalFinished):
        if e.ok:
            text = f"#{e.iteration} {e.branch}: evaluated {fmt.us(e.geomean_us)} µs"
        else:
            text, level = f"#{e.iteration} {e.branch}: {e.error_class or 'failed'}: {fmt.short(e.message, 80)}", "warn"
    elif isinstance(e, ev.AttemptCommitted):
        text = f"#{e.iteration} {e.branch}: {e.verdict} {fmt.us(e.geomean_us)} µs" + (
            f" {fmt.speedup(e.speedup)}" if e.speedup else "") + (f" {e.sha[:7]}" if e.sha else "")
        level = "good" if e.verdict == "accepted" else "info"
    elif isinstance(e, ev.SteeringReceived):
        text = f"steering seen {e.id}: {fmt.short(e.text, 60)}"
    elif isinstance(e, ev.SteeringApplied):
        text = f"steering used {e.id}" + (f" in #{e.iteration}" if e.iteration is not None else "") + (
            f": {e.detail}" if e.detail else "")
    elif isinstance(e, ev.SteeringRejected):
        text, level = f"steering rejected {e.id}: {e.reason}", "warn"
    elif isinstance(e, ev.SteeringDropped):
        text = f"steering dropped {e.id}"
    elif isinstance(e, ev.BudgetReached):
        text, level = f"budget reached: {e.kind} {e.value:g} of {e.limit:g}", "warn"
    elif isinstance(e, ev.ErrorEvent):
        text, level = f"{'FATAL ' if e.fatal else ''}error in {e.where}: {e.message}", "error"
    elif isinstance(e, ev.Recovery):
        text, level = f"recovery: {e.action}" + (f" ({e.detail})" if e.detail else ""), "warn"
    else:
        return None
    return ActivityLine(t, text, level)
