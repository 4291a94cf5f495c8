"""The one interface every proposer implements: ProposalContext in, Proposal out."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol


@dataclass
class AttemptInfo:
    """One earlier attempt on the branch, as a proposer sees it."""
    iteration: int
    verdict: str
    summary: str
    geomean_us: float | None
    message: str
    sha: str
    margin: float | None = None    # the most of the checker's tolerance an output used (1.0 = the limit)


@dataclass
class ProposalContext:
    iteration: int
    branch: str
    family: str
    task_name: str
    task_description: str
    parent_sha: str
    code: str                                   # submission.py at the branch head
    head_us: float | None = None
    baseline_us: float | None = None
    history: list[AttemptInfo] = field(default_factory=list)   # this branch's attempts, oldest first
    others: list[str] = field(default_factory=list)            # one line per other branch's best
    notes: list[str] = field(default_factory=list)             # steering prompts for this iteration
    settings: dict[str, Any] = field(default_factory=dict)     # CONFIG values forced by /set
    profile: str = ""                                          # the head's profile summary, if measured
    seed: int = 0
    read_code: Callable[[str], str] | None = None               # sha -> submission.py of that commit
    workdir: Path | None = None                                 # artifacts/<iteration>/
    worktree: Callable[[Path], Any] | None = None               # context manager: a checkout of parent_sha
    steering_ids: list[str] = field(default_factory=list)


@dataclass
class Proposal:
    code: str | None
    summary: str = ""
    transcript: str = ""
    error: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    transient: bool = False     # the endpoint or tool failed, not the idea: back off and retry later
    exhausted: bool = False     # nothing left to try on this branch: pause it
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.code is not None and self.error is None


class Proposer(Protocol):
    name: str
    prefetch: bool              # worth preparing the next proposal while the GPU evaluates

    def propose(self, ctx: ProposalContext, cancel: threading.Event) -> Proposal: ...


def cost_usd(tokens_in: int, tokens_out: int, price_in_per_mtok: float, price_out_per_mtok: float) -> float:
    return (tokens_in * price_in_per_mtok + tokens_out * price_out_per_mtok) / 1e6
