"""The agent's proposal side: build a ProposalContext from the session, run the proposer, prefetch ahead.

With llm and command the next proposal is prepared in a thread while the current candidate
is evaluated, so the GPU does not wait for the model. A prefetched proposal is used only if
its branch head and its steering are still what they were when it started; otherwise it is
discarded, and its tokens and cost are added to the next proposal so budgets stay honest.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.beam import pick_branch, schedulable
from agent.proposers import AttemptInfo, Proposal, ProposalContext
from agent.proposers.tune import coerce, read_knobs
from agent.steering import Directive
from agent.vcs import VcsError

if TYPE_CHECKING:
    from agent.loop import Agent

CODE_CACHE = 256


@dataclass
class Prefetch:
    branch: str
    parent: str
    ids: tuple[str, ...]
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    proposal: Proposal | None = None


class Workbench:
    def __init__(self, agent: "Agent"):
        self.agent = agent
        self.prefetch: Prefetch | None = None
        self.wasted = [0, 0, 0.0]   # tokens in, tokens out, USD of discarded prefetches
        self._code: dict[str, str] = {}

    # -- reading the record --------------------------------------------------------------------
    def read(self, sha: str) -> str:
        if sha not in self._code:
            if len(self._code) >= CODE_CACHE:
                self._code.pop(next(iter(self._code)))
            assert self.agent.repo is not None
            self._code[sha] = self.agent.repo.read(sha)
        return self._code[sha]

    def check_set(self, branch: str, settings: dict[str, str]) -> dict[str, Any]:
        """`/set` values coerced to the branch's SPACE; ValueError (KnobError) with the reason otherwise."""
        b = self.agent.state.branches[branch]
        try:
            _, space = read_knobs(self.read(b.head_sha))
        except VcsError as exc:
            raise ValueError(str(exc)) from None
        return {key: coerce(space, key, raw) for key, raw in settings.items()}

    def profile(self, branch: str) -> str:
        """The profile summary of the branch head's evaluation, when it was measured in profile mode."""
        st = self.agent.state
        head = st.branches[branch].head_sha
        attempt = next((a for a in reversed(st.attempts) if a.sha == head), None)
        path = (self.agent.session.artifacts / str(attempt.iteration) / "eval.json" if attempt
                else self.agent.session.artifacts / "setup" / f"{branch.replace('/', '_')}.json")
        try:
            cases = json.loads(path.read_text()).get("cases", [])
        except (OSError, ValueError):
            return ""
        lines = []
        for c in cases:
            p = c.get("profile")
            if c.get("kind") == "benchmark" and isinstance(p, dict):
                top = ", ".join(f"{t.get('name', '')[:40]} {t.get('us_per_call', 0):.1f} µs" for t in p.get("top", [])[:3])
                label = " ".join(f"{k}={v}" for k, v in (c.get("spec") or {}).items() if k != "seed")
                busy = p.get("busy_share")
                lines.append(f"{label}: {p.get('launches_per_call', 0):.0f} launches/call, busy "
                             f"{busy if busy is None else f'{busy:.0%}'}; top: {top}")
        return "\n".join(lines)

    # -- contexts ------------------------------------------------------------------------------
    def context(self, iteration: int, branch: str, parent: str, directives: list[Directive]) -> ProposalContext:
        a = self.agent
        st = a.state
        b = st.branches[branch]
        history = [AttemptInfo(x.iteration, x.verdict, x.summary, x.geomean_us, x.message, x.sha, x.margin)
                   for x in st.attempts if x.branch == branch and x.sha]
        others = []
        for o in st.branches.values():
            if o.name != branch and o.live:
                speed = f", {st.baseline_us / o.best_us:.3f}x" if o.best_us and st.baseline_us else ""
                best = f"{o.best_us:.2f} µs" if o.best_us else "no correct kernel yet"
                others.append(f"{o.name} ({o.family}): {best}{speed}, {o.attempts} attempts, {o.state}")
        workdir = a.session.dir / "work" / str(iteration)
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        repo = a.repo
        return ProposalContext(
            iteration=iteration, branch=branch, family=b.family, task_name=a.task.name,
            task_description=a.task.description, parent_sha=parent, code=self.read(parent), head_us=b.best_us,
            baseline_us=st.baseline_us, history=history, others=others,
            notes=[d.text for d in directives if not d.is_set],
            settings=a.steering.settings_for(branch, [d for d in directives if d.is_set]),
            profile=self.profile(branch), seed=a.cfg.seed, read_code=self.read, workdir=workdir,
            worktree=(lambda path: repo.worktree(parent, path)) if repo is not None else None,
            steering_ids=[d.id for d in directives])

    # -- proposing -----------------------------------------------------------------------------
    def _call(self, ctx: ProposalContext, cancel: threading.Event) -> Proposal:
        started = time.monotonic()
        try:
            p = self.agent.proposer.propose(ctx, cancel)
        except Exception as exc:  # noqa: BLE001 - a proposer bug is a failed attempt, not a dead agent
            p = Proposal(None, error=f"the {self.agent.proposer.name} proposer raised {type(exc).__name__}: {exc}",
                         transient=True)
        p.duration_s = p.duration_s or time.monotonic() - started
        return p

    def _run_abortable(self, ctx: ProposalContext, abort: threading.Event) -> Proposal:
        box: list[Proposal] = []
        cancel = threading.Event()
        t = threading.Thread(target=lambda: box.append(self._call(ctx, cancel)), daemon=True, name="steer-propose")
        t.start()
        while t.is_alive():
            if abort.is_set():
                cancel.set()
                t.join(5)
                return Proposal(None, error="aborted", transient=True)
            t.join(0.2)
        return box[0]

    def proposal(self, iteration: int, branch: str, parent: str, directives: list[Directive],
                 abort: threading.Event) -> Proposal:
        ids = tuple(d.id for d in directives)
        pre = self.prefetch
        p: Proposal | None = None
        if pre is not None and (pre.branch, pre.parent, pre.ids) == (branch, parent, ids):
            self.prefetch = None
            while not pre.done.wait(0.2):
                if abort.is_set():
                    pre.cancel.set()
                    return Proposal(None, error="aborted", transient=True)
            p = pre.proposal
        else:
            self.drop_prefetch()
        if p is None:
            p = self._run_abortable(self.context(iteration, branch, parent, directives), abort)
        if any(self.wasted):
            p.tokens_in += int(self.wasted[0])
            p.tokens_out += int(self.wasted[1])
            p.cost_usd += float(self.wasted[2])
            p.transcript += (f"\n(includes {self.wasted[0]} + {self.wasted[1]} tokens, ${self.wasted[2]:.4f}, "
                             "of a prefetched proposal that was discarded)\n")
            self.wasted = [0, 0, 0.0]
        return p

    def prefetched_branch(self, busy: set[str]) -> str | None:
        """The branch a prefetch was started for, if it may still run next with the same head and steering."""
        pre = self.prefetch
        if pre is None:
            return None
        st = self.agent.state
        b = st.branches.get(pre.branch)
        ok = (b is not None and pre.branch not in busy and b.head_sha == pre.parent
              and any(x.name == pre.branch for x in schedulable(st))
              and tuple(d.id for d in self.agent.steering.for_branch(pre.branch)) == pre.ids)
        if not ok:
            self.drop_prefetch()
            return None
        return pre.branch

    def start_prefetch(self, busy: set[str]) -> None:
        a = self.agent
        if not a.proposer.prefetch or self.prefetch is not None:
            return
        branch = pick_branch(a.state, exclude=busy) or pick_branch(a.state)
        if branch is None:
            return
        directives = a.steering.for_branch(branch)
        parent = a.state.branches[branch].head_sha
        pre = Prefetch(branch=branch, parent=parent, ids=tuple(d.id for d in directives))
        ctx = self.context(a.state.iteration + 1, branch, parent, directives)

        def work() -> None:
            try:
                pre.proposal = self._call(ctx, pre.cancel)
            finally:
                pre.done.set()
        self.prefetch = pre
        threading.Thread(target=work, daemon=True, name="steer-prefetch").start()

    def drop_prefetch(self) -> None:
        pre, self.prefetch = self.prefetch, None
        if pre is None:
            return
        pre.cancel.set()
        if pre.done.is_set() and pre.proposal is not None:
            self.wasted[0] += pre.proposal.tokens_in
            self.wasted[1] += pre.proposal.tokens_out
            self.wasted[2] += pre.proposal.cost_usd
