"""Event types: one dataclass each, and their JSON form (one object a line in events.jsonl).

Every event carries `seq` (1, 2, 3, ... in file order, assigned on append), `ts` (unix seconds)
and `type`. Unknown types and fields from a newer Steer are kept as `UnknownEvent` / ignored,
so an old console can still show a newer session.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

EVENT_TYPES: dict[str, type["Event"]] = {}


@dataclass
class Event:
    type: ClassVar[str] = "event"
    seq: int = field(default=0, kw_only=True)
    ts: float = field(default=0.0, kw_only=True)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        EVENT_TYPES[cls.type] = cls

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return {"seq": d.pop("seq"), "ts": d.pop("ts"), "type": self.type, **d}


@dataclass
class UnknownEvent(Event):
    """An event of a type this version does not know; kept so nothing is dropped."""
    type: ClassVar[str] = "unknown"
    raw: dict[str, Any] = field(default_factory=dict)


# -- session lifecycle ---------------------------------------------------------------------
@dataclass
class SessionStarted(Event):
    type: ClassVar[str] = "session_started"
    name: str
    task: str
    task_path: str
    proposer: str
    model: str | None = None
    device: str = "cpu"
    device_name: str = ""
    gpus: list[int] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    version: str = ""


@dataclass
class SessionResumed(Event):
    type: ClassVar[str] = "session_resumed"
    pid: int
    next_iteration: int
    mode: str = "headless"   # headless | detached | console
    config: dict[str, Any] = field(default_factory=dict)   # options overridden for this run


@dataclass
class Recovery(Event):
    """Something was repaired: a torn event line, a git lock, a moved ref, a GPU re-checked."""
    type: ClassVar[str] = "recovery"
    action: str
    detail: str = ""


@dataclass
class AgentStopped(Event):
    type: ClassVar[str] = "agent_stopped"
    reason: str              # finished | signal | budget | error | handoff | stop
    iterations: int = 0
    detail: str = ""


@dataclass
class BaselineMeasured(Event):
    type: ClassVar[str] = "baseline_measured"
    geomean_us: float | None
    cases: list[dict[str, Any]] = field(default_factory=list)   # [{"spec": ..., "mean_us": ...}]
    ok: bool = True
    message: str = ""


@dataclass
class NoiseMeasured(Event):
    """The noise floors: the smallest relative gain an attempt must show to be accepted.

    Measured at setup by timing each seed twice more, each time in a fresh process, both on one
    draw of inputs. `floor` is the session's, the largest relative gap between two timings of the
    same code (at least 1%); each family's is its own seed's gap (SessionState.family_floors).
    `samples` holds one entry per seed: {"branch", "first_us", "again_us", "gap"}, the two timings
    and their gap; a seed that failed either timing is left out (and reported by an error event).
    """
    type: ClassVar[str] = "noise_measured"
    floor: float
    samples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class NoiseFloorSet(Event):
    """The floor changed while the session runs (`/noise`): a fraction, or None for the measured one."""
    type: ClassVar[str] = "noise_floor_set"
    floor: float | None
    steering_id: str | None = None


# -- beam ----------------------------------------------------------------------------------
@dataclass
class BranchCreated(Event):
    type: ClassVar[str] = "branch_created"
    branch: str
    family: str
    sha: str
    source: str = ""         # seed file, or "fork of B@sha"
    parent_branch: str | None = None
    geomean_us: float | None = None   # the head's measured geomean, when known
    geomean_se_us: float | None = None   # its standard error (from the per-case stderr)


@dataclass
class BranchStateChanged(Event):
    type: ClassVar[str] = "branch_state_changed"
    branch: str
    state: str               # active | paused | killed
    reason: str = ""
    steering_id: str | None = None


@dataclass
class FocusChanged(Event):
    type: ClassVar[str] = "focus_changed"
    branch: str | None       # None: unfocused, every live branch is scheduled again
    steering_id: str | None = None


@dataclass
class PlateauDetected(Event):
    type: ClassVar[str] = "plateau"
    branch: str
    attempts_since_gain: int
    minutes_since_gain: float
    best_us: float | None = None


# -- one iteration ---------------------------------------------------------------------------
@dataclass
class IterationStarted(Event):
    type: ClassVar[str] = "iteration_started"
    iteration: int
    branch: str
    parent_sha: str
    gpu: int | None = None   # the GPU evaluating it (None: the CPU)


@dataclass
class ProposalMade(Event):
    type: ClassVar[str] = "proposal_made"
    iteration: int
    branch: str
    proposer: str
    ok: bool
    summary: str = ""
    error: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    duration_s: float = 0.0
    transcript: str | None = None    # path relative to the session dir
    steering_ids: list[str] = field(default_factory=list)
    transient: bool = False          # the endpoint failed, not the idea: the loop backs off


@dataclass
class EvalProgress(Event):
    type: ClassVar[str] = "eval_progress"
    iteration: int
    branch: str
    stage: str
    detail: str = ""         # "benchmark 3/12", ...


@dataclass
class EvalFinished(Event):
    type: ClassVar[str] = "eval_finished"
    iteration: int
    branch: str
    ok: bool
    error_class: str | None
    message: str
    geomean_us: float | None
    speedup: float | None = None     # over the baseline measured in this session
    result: dict[str, Any] = field(default_factory=dict)   # the harness JSON (tails trimmed)


@dataclass
class AttemptCommitted(Event):
    type: ClassVar[str] = "attempt_committed"
    iteration: int
    branch: str
    sha: str
    parent_sha: str
    verdict: str             # accepted | rejected | failed
    summary: str = ""
    geomean_us: float | None = None
    speedup: float | None = None
    reason: str = ""         # why rejected/failed, in one line
    ref: str = ""            # the branch ref, or refs/attempts/<iteration>
    geomean_se_us: float | None = None
    head_us: float | None = None     # the head re-timed by verify (a fresher time than the one on record)
    head_se_us: float | None = None
    margin: float | None = None      # the most of the checker's tolerance an output used (1.0 = the limit)


# -- steering ------------------------------------------------------------------------------
@dataclass
class SteeringReceived(Event):
    type: ClassVar[str] = "steering_received"
    id: str
    text: str
    target: str | None = None    # None: all branches
    scope: str = "once"          # once | standing
    kind: str = "prompt"         # prompt | command
    inbox_offset: int = 0        # byte offset just past this line in inbox.jsonl


@dataclass
class SteeringApplied(Event):
    type: ClassVar[str] = "steering_applied"
    id: str
    iteration: int | None = None   # None for commands applied between iterations
    branch: str | None = None
    detail: str = ""


@dataclass
class SteeringRejected(Event):
    type: ClassVar[str] = "steering_rejected"
    id: str
    reason: str


@dataclass
class SteeringDropped(Event):
    type: ClassVar[str] = "steering_dropped"
    id: str
    by: str | None = None


# -- budgets and errors ------------------------------------------------------------------------
@dataclass
class BudgetReached(Event):
    type: ClassVar[str] = "budget_reached"
    kind: str                # iterations | hours | cost
    limit: float
    value: float


@dataclass
class ErrorEvent(Event):
    type: ClassVar[str] = "error"
    where: str
    message: str
    fatal: bool = False
    iteration: int | None = None


def event_from_json(d: dict[str, Any]) -> Event:
    cls = EVENT_TYPES.get(str(d.get("type")))
    seq, ts = int(d.get("seq", 0) or 0), float(d.get("ts", 0.0) or 0.0)
    if cls is None or cls is UnknownEvent:
        return UnknownEvent(raw=d, seq=seq, ts=ts)
    names = {f.name for f in fields(cls)} - {"seq", "ts"}
    try:
        return cls(**{k: v for k, v in d.items() if k in names}, seq=seq, ts=ts)
    except TypeError:  # a required field is missing: keep the line rather than lose it
        return UnknownEvent(raw=d, seq=seq, ts=ts)


def parse_line(line: bytes | str) -> Event | None:
    """One events.jsonl line to an Event; None for garbage (the reader counts and skips it)."""
    try:
        d = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(d, dict) or "type" not in d:
        return None
    return event_from_json(d)
