"""SessionState: the fold of the events. Nothing here is stored; everything is derived.

`apply(event)` is cheap and incremental, so a console folds new events as they arrive
instead of re-reading the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from agent import events as ev

ACTIVE, PAUSED, KILLED = "active", "paused", "killed"


@dataclass
class Attempt:
    iteration: int
    branch: str
    ts: float
    verdict: str = "running"        # running | accepted | rejected | failed
    summary: str = ""
    geomean_us: float | None = None
    speedup: float | None = None
    error_class: str | None = None
    message: str = ""
    sha: str = ""
    parent_sha: str = ""
    steering_ids: list[str] = field(default_factory=list)
    tokens: int = 0
    cost_usd: float = 0.0
    proposal_ok: bool = True
    gpu: int | None = None
    margin: float | None = None     # the most of the checker's tolerance an output used


@dataclass
class Branch:
    name: str
    family: str
    state: str = ACTIVE
    head_sha: str = ""
    best_us: float | None = None
    attempts: int = 0
    accepted: int = 0
    since_gain: int = 0
    last_gain_ts: float = 0.0
    plateau: bool = False
    created_seq: int = 0
    history: list[tuple[int, float]] = field(default_factory=list)  # (iteration, best_us) after each gain
    best_se_us: float | None = None  # standard error of best_us (the head's measurement)
    state_reason: str = ""
    iterations: list[int] = field(default_factory=list)   # every iteration run on this branch
    proposal_fail_streak: int = 0    # consecutive failed proposals (no code to evaluate)
    source: str = ""
    parent_branch: str | None = None
    boost: bool = True               # new, forked or resumed and not run since: the scheduler runs it first

    @property
    def live(self) -> bool:
        return self.state != KILLED


@dataclass
class Steering:
    id: str
    text: str
    target: str | None
    scope: str
    kind: str
    status: str = "seen"            # queued | seen | used | rejected | dropped
    used_in: list[int] = field(default_factory=list)
    reason: str = ""
    received_ts: float = 0.0


# An accepted gain is at least this fraction of the head's time, whatever was measured; a measured
# noise floor above HIGH_NOISE_FLOOR is worth a warning (the same code has timed within 1-2% on an
# H200). (Here, not in agent.beam, which imports gitpython: the console's first paint does not need it.)
NOISE_FLOOR = 0.01
HIGH_NOISE_FLOOR = 0.05


@dataclass
class SessionState:
    name: str = ""
    task: str = ""
    proposer: str = ""
    model: str | None = None
    device: str = ""
    device_name: str = ""
    started_ts: float = 0.0
    last_ts: float = 0.0
    baseline_us: float | None = None
    baseline_cases: list[dict[str, Any]] = field(default_factory=list)
    noise_floor: float | None = None   # measured at setup (NoiseMeasured); None: not measured
    noise_samples: list[dict[str, Any]] = field(default_factory=list)
    noise_floor_set: float | None = None   # --noise-floor (at start or the last resume) or /noise, the latest
    branches: dict[str, Branch] = field(default_factory=dict)
    attempts: list[Attempt] = field(default_factory=list)
    steering: dict[str, Steering] = field(default_factory=dict)
    focus: str | None = None
    iteration: int = 0              # the last iteration started
    evaluations: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    running: bool = False           # an agent said it started/resumed and has not said it stopped
    stop_reason: str = ""
    activity: str = ""
    errors: list[ev.ErrorEvent] = field(default_factory=list)
    recoveries: list[ev.Recovery] = field(default_factory=list)
    plateaus: list[ev.PlateauDetected] = field(default_factory=list)
    last_seq: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    inbox_offset: int = 0           # inbox bytes consumed: the next agent reads from here
    _by_iteration: dict[int, Attempt] = field(default_factory=dict, repr=False)

    # -- derived views --------------------------------------------------------------------
    @property
    def best(self) -> Attempt | None:
        accepted = [a for a in self.attempts if a.verdict == "accepted" and a.geomean_us]
        return min(accepted, key=lambda a: a.geomean_us, default=None)

    @property
    def best_us(self) -> float | None:
        vals = [b.best_us for b in self.branches.values() if b.best_us]
        return min(vals) if vals else None

    @property
    def best_speedup(self) -> float | None:
        best = self.best_us
        return self.baseline_us / best if best and self.baseline_us else None

    @property
    def floor(self) -> tuple[float, str] | None:
        """The largest relative gain the agent may require, and whether it was "set" or "measured"
        (measured: each family's own floor is at most this, `family_floors`)."""
        if self.noise_floor_set is not None:
            return self.noise_floor_set, "set"
        return (self.noise_floor, "measured") if self.noise_floor is not None else None

    def family_floors(self) -> dict[str, float]:
        """Each family's measured noise floor: the largest gap of the pairs timed from its seeds, and
        never under NOISE_FLOOR. A family with no pair (its re-timing failed) is not in it."""
        out: dict[str, float] = {}
        for s in self.noise_samples:
            b = self.branches.get(str(s.get("branch")))
            if b is not None and s.get("gap") is not None:
                out[b.family] = max(out.get(b.family, NOISE_FLOOR), float(s["gap"]))
        return out

    def attempt(self, iteration: int) -> Attempt | None:
        return self._by_iteration.get(iteration)

    def live_branches(self) -> list[Branch]:
        return [b for b in self.branches.values() if b.live]

    def elapsed_s(self) -> float:
        return max(0.0, self.last_ts - self.started_ts) if self.started_ts else 0.0

    def evals_per_hour(self) -> float | None:
        hours = self.elapsed_s() / 3600
        return self.evaluations / hours if hours > 1e-3 and self.evaluations else None

    def pending_steering(self) -> list[Steering]:
        return [s for s in self.steering.values() if s.status == "seen" or (s.scope == "standing"
                                                                           and s.status == "used")]

    # -- the fold -------------------------------------------------------------------------
    def apply(self, e: ev.Event) -> None:
        self.last_seq = max(self.last_seq, e.seq)
        self.last_ts = max(self.last_ts, e.ts)
        handler = getattr(self, "_on_" + e.type, None)
        if handler is not None:
            handler(e)

    def apply_all(self, events: Iterable[ev.Event]) -> "SessionState":
        for e in events:
            self.apply(e)
        return self

    def _on_session_started(self, e: ev.SessionStarted) -> None:
        self.name, self.task, self.proposer, self.model = e.name, e.task, e.proposer, e.model
        self.device, self.device_name, self.config = e.device, e.device_name, dict(e.config)
        self.noise_floor_set = _fraction(e.config.get("noise_floor"))
        self.started_ts = self.started_ts or e.ts
        self.running = True

    def _on_session_resumed(self, e: ev.SessionResumed) -> None:
        self.running = True
        if "noise_floor" in e.config:
            self.noise_floor_set = _fraction(e.config["noise_floor"])
        self.stop_reason = ""
        # An iteration that was running when the previous agent died is lost; mark it.
        for a in self.attempts:
            if a.verdict == "running":
                a.verdict = "failed"
                a.message = a.message or "interrupted: the agent stopped during this iteration"

    def _on_agent_stopped(self, e: ev.AgentStopped) -> None:
        self.running = False
        self.stop_reason = e.reason
        self.activity = f"stopped ({e.reason})"

    def _on_baseline_measured(self, e: ev.BaselineMeasured) -> None:
        self.baseline_us = e.geomean_us
        self.baseline_cases = list(e.cases)

    def _on_noise_measured(self, e: ev.NoiseMeasured) -> None:
        self.noise_floor = e.floor
        self.noise_samples = list(e.samples)

    def _on_noise_floor_set(self, e: ev.NoiseFloorSet) -> None:
        self.noise_floor_set = _fraction(e.floor)

    def _on_branch_created(self, e: ev.BranchCreated) -> None:
        b = Branch(name=e.branch, family=e.family, head_sha=e.sha, best_us=e.geomean_us, created_seq=e.seq,
                   last_gain_ts=e.ts, best_se_us=e.geomean_se_us, source=e.source, parent_branch=e.parent_branch)
        if e.geomean_us:
            b.history.append((self.iteration, e.geomean_us))
        self.branches[e.branch] = b

    def _on_branch_state_changed(self, e: ev.BranchStateChanged) -> None:
        b = self.branches.get(e.branch)
        if b is not None:
            b.state = e.state
            b.state_reason = e.reason
            if e.state == ACTIVE:
                b.proposal_fail_streak = 0
                b.boost = True
            if e.state == KILLED and self.focus == e.branch:
                self.focus = None

    def _on_focus_changed(self, e: ev.FocusChanged) -> None:
        self.focus = e.branch

    def _on_plateau(self, e: ev.PlateauDetected) -> None:
        self.plateaus.append(e)
        b = self.branches.get(e.branch)
        if b is not None:
            b.plateau = True

    def _on_iteration_started(self, e: ev.IterationStarted) -> None:
        self.iteration = max(self.iteration, e.iteration)
        a = Attempt(iteration=e.iteration, branch=e.branch, ts=e.ts, parent_sha=e.parent_sha, gpu=e.gpu)
        b = self.branches.get(e.branch)
        if b is not None:
            b.iterations.append(e.iteration)
            b.boost = False
        self.attempts.append(a)
        self._by_iteration[e.iteration] = a
        self.activity = f"#{e.iteration} {e.branch}: proposing"

    def _on_proposal_made(self, e: ev.ProposalMade) -> None:
        self.tokens += e.tokens_in + e.tokens_out
        self.cost_usd += e.cost_usd
        a = self._by_iteration.get(e.iteration)
        if a is not None:
            a.summary = e.summary
            a.steering_ids = list(e.steering_ids)
            a.tokens = e.tokens_in + e.tokens_out
            a.cost_usd = e.cost_usd
            a.proposal_ok = e.ok
            if not e.ok:
                a.message = e.error or "proposal failed"
        b = self.branches.get(e.branch)
        if b is not None and not e.transient:
            b.proposal_fail_streak = 0 if e.ok else b.proposal_fail_streak + 1
        self.activity = f"#{e.iteration} {e.branch}: " + ("evaluating" if e.ok else f"proposal failed: {e.error}")

    def _on_eval_progress(self, e: ev.EvalProgress) -> None:
        if e.stage == "verify":  # the head, then the candidate, timed again before a win is accepted
            self.activity = f"#{e.iteration} {e.branch}: {e.detail or 'verifying'}"
            return
        self.activity = f"#{e.iteration} {e.branch}: evaluating {e.stage}" + (f" {e.detail}" if e.detail else "")

    def _on_eval_finished(self, e: ev.EvalFinished) -> None:
        self.evaluations += 1
        a = self._by_iteration.get(e.iteration)
        if a is not None:
            a.geomean_us, a.speedup, a.error_class = e.geomean_us, e.speedup, e.error_class
            if not e.ok:
                a.message = e.message
        self.activity = f"#{e.iteration} {e.branch}: committing"

    def _on_attempt_committed(self, e: ev.AttemptCommitted) -> None:
        a = self._by_iteration.get(e.iteration)
        if a is None:
            a = Attempt(iteration=e.iteration, branch=e.branch, ts=e.ts)
            self.attempts.append(a)
            self._by_iteration[e.iteration] = a
        a.verdict, a.sha, a.parent_sha = e.verdict, e.sha, e.parent_sha
        a.summary = a.summary or e.summary
        a.geomean_us = e.geomean_us if e.geomean_us is not None else a.geomean_us
        a.speedup = e.speedup if e.speedup is not None else a.speedup
        a.margin = e.margin if e.margin is not None else a.margin
        if e.reason and not a.message:
            a.message = e.reason
        b = self.branches.get(e.branch)
        if b is None:
            return
        b.attempts += 1
        if e.verdict == "accepted":
            b.accepted += 1
            b.head_sha = e.sha
            b.best_us = e.geomean_us
            b.best_se_us = e.geomean_se_us
            b.since_gain = 0
            b.last_gain_ts = e.ts
            b.plateau = False
            if e.geomean_us:
                b.history.append((e.iteration, e.geomean_us))
        else:
            b.since_gain += 1
            if e.head_us:  # verify re-timed the head: later attempts are judged against that time
                b.best_us, b.best_se_us = e.head_us, e.head_se_us
        self.activity = f"#{e.iteration} {e.branch}: {e.verdict}"

    def _on_steering_received(self, e: ev.SteeringReceived) -> None:
        self.steering[e.id] = Steering(id=e.id, text=e.text, target=e.target, scope=e.scope, kind=e.kind,
                                       received_ts=e.ts)
        self.inbox_offset = max(self.inbox_offset, e.inbox_offset)

    def _on_steering_applied(self, e: ev.SteeringApplied) -> None:
        s = self.steering.get(e.id)
        if s is not None:
            s.status = "used"
            if e.iteration is not None:
                s.used_in.append(e.iteration)

    def _on_steering_rejected(self, e: ev.SteeringRejected) -> None:
        s = self.steering.get(e.id)
        if s is not None:
            s.status, s.reason = "rejected", e.reason

    def _on_steering_dropped(self, e: ev.SteeringDropped) -> None:
        s = self.steering.get(e.id)
        if s is not None:
            s.status = "dropped"

    def _on_error(self, e: ev.ErrorEvent) -> None:
        self.errors.append(e)
        self.activity = f"error in {e.where}: {e.message}"

    def _on_recovery(self, e: ev.Recovery) -> None:
        self.recoveries.append(e)


def fold(events: Iterable[ev.Event]) -> SessionState:
    return SessionState().apply_all(events)


def _fraction(v: Any) -> float | None:
    """A stored option's number; None for a missing or malformed one (a hand-edited record)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
