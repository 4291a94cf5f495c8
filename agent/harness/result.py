"""The harness's one result object per evaluation, and the vocabulary of its errors."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# Error classes, cheapest stage first. None means the candidate passed.
SYNTAX = "syntax"        # the file does not compile
IMPORT = "import"        # importing it raised
INTERFACE = "interface"  # no callable custom_kernel
WRONG = "wrong"          # the checker rejected an output
EXCEPTION = "exception"  # custom_kernel raised
TIMEOUT = "timeout"      # a stage ran past its limit; the process group was killed
CRASH = "crash"          # the process died (signal, os._exit, sys.exit) before reporting
CUDA = "cuda"            # a CUDA error (illegal address, launch failure, out of memory)
GUARD = "guard"          # the timing/checking machinery was tampered with, or timing is inconsistent
HARNESS = "harness"      # Steer's own fault (bad task, unwritable temp dir); not the candidate's
ERROR_CLASSES = (SYNTAX, IMPORT, INTERFACE, WRONG, EXCEPTION, TIMEOUT, CRASH, CUDA, GUARD, HARNESS)

STAGES = ("import", "smoke", "tests", "bench")
MODES = ("quick", "full", "leaderboard", "profile")


@dataclass
class CaseResult:
    kind: str                      # "test" or "benchmark"
    spec: dict[str, Any]
    passed: bool
    message: str = ""
    mean_us: float | None = None
    std_us: float | None = None
    stderr_us: float | None = None
    best_us: float | None = None
    worst_us: float | None = None
    runs: int = 0
    per_call_inputs: int = 1       # k: inputs per timed repeat
    profile: dict[str, Any] | None = None
    margin: float | None = None    # the most of the checker's tolerance a checked output used (1.0 = the limit)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CaseResult":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class EvalResult:
    ok: bool
    error_class: str | None
    message: str
    stage: str | None
    mode: str
    device: str
    task: str
    candidate: str
    geomean_us: float | None = None
    cases: list[CaseResult] = field(default_factory=list)
    stderr_tail: str = ""
    stdout_tail: str = ""
    flags: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    timed_s: float = 0.0           # seconds inside timed regions (the kernel work being measured)
    stage_s: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    sandbox: str = ""              # what confinement applied (landlock or not)

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.wall_s - self.timed_s)

    @property
    def benchmarks(self) -> list[CaseResult]:
        return [c for c in self.cases if c.kind == "benchmark"]

    @property
    def worst_margin(self) -> CaseResult | None:
        """The case whose output came closest to the checker's limit, where the task measures it."""
        measured = [c for c in self.cases if c.margin is not None]
        return max(measured, key=lambda c: c.margin) if measured else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["overhead_s"] = round(self.overhead_s, 4)
        worst = self.worst_margin
        d["margin"] = worst.margin if worst else None
        d["torch"] = self.versions.get("torch")
        d["triton"] = self.versions.get("triton")
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "EvalResult":
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        kw["cases"] = [CaseResult.from_json(c) for c in d.get("cases", [])]
        return cls(**kw)


def spec_label(spec: dict[str, Any]) -> str:
    """A case as commit messages name it: its spec's keys and values, without the seed."""
    return " ".join(f"{k}={v}" for k, v in spec.items() if k != "seed")


def margin_text(margin: float) -> str:
    """A fraction of the checker's tolerance as a percentage: 0.67%, 3.1%, 42%."""
    pct = 100 * margin
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.1f}%" if pct >= 1 else f"{pct:.2g}%"


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals or len(vals) != len(values):
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def rank_score(means: list[float], ranking_by: str) -> float | None:
    """The task's ranking statistic over benchmark means (µs)."""
    if not means:
        return None
    if ranking_by == "mean":
        return sum(means) / len(means)
    if ranking_by == "last":
        return means[-1]
    return geomean(means)
