"""The beam: which branch runs next, when an attempt counts as a gain, plateaus, and the branch commands.

Everything reads the folded SessionState, so a resumed agent schedules exactly as the one
that died would have. Commands (pause, resume, fork, kill, focus) emit events and, for fork,
create a git ref; a bad argument raises BeamError with the reason, never half-applies.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from agent import events as ev
from agent.state import ACTIVE, KILLED, NOISE_FLOOR, PAUSED, Branch, SessionState
from agent.vcs import SessionRepo

# an accepted gain is at least NOISE_FLOOR, 1% (or the branch's measured floor, if more) ...
NOISE_SIGMAS = 2.0      # ... and at least 2 standard errors of the difference
GAIN_WINDOW = 6         # attempts of a branch that count as "recent"
GAIN_FLOOR = 0.02       # priority of a branch with no recent gain, relative to a 100% gain
STARVE_PER_BRANCH = 3   # no active branch waits more than 3 x (active branches) iterations ...
STARVE_MIN = 6          # ... or 6, whichever is more

Emit = Callable[[ev.Event], ev.Event]


class BeamError(ValueError):
    """A branch command that cannot be applied; the message is the reason shown to the person."""


# -- measuring ---------------------------------------------------------------------------------
def geomean_se(cases: Iterable[dict[str, Any]]) -> float | None:
    """Standard error of the geomean of benchmark means, from each case's standard error.

    log g = mean(log x_i), so var(log g) = sum((se_i / x_i)^2) / n^2 and se_g ~= g * sd(log g).
    """
    bench = [c for c in cases if c.get("kind") == "benchmark" and c.get("mean_us")]
    if not bench:
        return None
    logs = [math.log(c["mean_us"]) for c in bench]
    g = math.exp(sum(logs) / len(logs))
    rel = [(float(c.get("stderr_us") or 0.0) / c["mean_us"]) ** 2 for c in bench]
    return g * math.sqrt(sum(rel)) / len(bench)


@dataclass
class Judgement:
    verdict: str     # accepted | rejected | failed
    reason: str


def relative_gap(a: float, b: float) -> float:
    """How far two timings of the same code fell apart, relative to the slower: a head timed at the
    slower value and a no-op candidate at the faster one would show a gain of exactly this fraction."""
    return abs(a - b) / max(a, b)


def noise_floor(pairs: Iterable[tuple[float, float]]) -> float:
    """The session's noise floor from pairs of timings of the same code, each in its own process:
    the largest relative gap, and never under NOISE_FLOOR."""
    return max([NOISE_FLOOR, *(relative_gap(a, b) for a, b in pairs if a > 0 and b > 0)])


def judge(ok: bool, error: str, new_us: float | None, new_se: float | None,
          head_us: float | None, head_se: float | None, spread: float = 0.0,
          floor: float = NOISE_FLOOR, floor_name: str = "the session's noise floor") -> Judgement:
    """Accepted when correct and faster than the head by more than the noise: `floor` of the head's
    time (1%, or the measured floor of the branch's family), 2 SE of the two, or `spread`, how far
    two timings of the same candidate fell apart (run-to-run noise that no one run's standard error
    shows). The reason names the floor as `floor_name` when the floor set the bar."""
    if not ok:
        return Judgement("failed", error or "evaluation failed")
    if not new_us:
        return Judgement("failed", "the evaluation reported no geomean")
    if not head_us:
        return Judgement("accepted", "first correct measurement on this branch")
    noise = NOISE_SIGMAS * math.sqrt((new_se or 0.0) ** 2 + (head_se or 0.0) ** 2)
    threshold = max(floor * head_us, noise, spread)
    # name the floor when it is what the gain must beat and is more than the fixed 1%
    why = f", {floor_name} of {100 * floor:.1f}%" if (
        floor > NOISE_FLOOR and threshold == floor * head_us) else ""
    gain = head_us - new_us
    if gain > threshold:
        return Judgement("accepted", f"{100 * gain / head_us:.1f}% faster than the head's {head_us:.2f} µs "
                                     f"(noise threshold {threshold:.2f} µs{why})")
    what = "slower than" if gain < 0 else "within noise of"
    return Judgement("rejected", f"{new_us:.2f} µs is {what} the head's {head_us:.2f} µs "
                                 f"(a gain must exceed {threshold:.2f} µs{why})")


# -- scheduling --------------------------------------------------------------------------------
def recent_gain(b: Branch, window: int = GAIN_WINDOW) -> float:
    """Sum of relative improvements accepted within the branch's last `window` attempts."""
    recent = b.iterations[-window:]
    if not recent:
        return 0.0
    total, prev = 0.0, None
    for iteration, us in b.history:
        if prev and iteration >= recent[0] and us:
            total += prev / us - 1.0
        prev = us
    return total


def schedulable(state: SessionState, exclude: Iterable[str] = ()) -> list[Branch]:
    skip = set(exclude)
    live = [b for b in state.branches.values() if b.state == ACTIVE and b.name not in skip]
    if state.focus is not None:
        live = [b for b in live if b.name == state.focus]
    return live


def pick_branch(state: SessionState, exclude: Iterable[str] = ()) -> str | None:
    """Recent gainers first; the wait since a branch last ran multiplies its priority, so none starves.

    With no gains anywhere this is round-robin; a branch with a recent 10% gain runs about
    six times as often as a flat one, and no active branch waits more than max(6, 3 x active
    branches) iterations. A branch that is new, forked or resumed runs before any other.
    """
    best: tuple[float, int, str] | None = None
    live = schedulable(state, exclude)
    starve_after = max(STARVE_MIN, STARVE_PER_BRANCH * len(live))
    for b in live:
        last = b.iterations[-1] if b.iterations else 0
        wait = state.iteration - last + 1
        priority = (GAIN_FLOOR + recent_gain(b)) * wait
        if wait > starve_after:  # the floor: a branch left waiting this long runs next, whatever the gains
            priority = 1e9 + wait
        if b.boost:              # new, forked or just resumed: the person wants to see it run
            priority = 2e9 + wait
        key = (priority, -b.created_seq, b.name)
        if best is None or key > best:
            best = key
    return best[2] if best else None


def plateau(b: Branch, attempts: int, minutes: float, now: float | None = None) -> ev.PlateauDetected | None:
    """A plateau event when the branch has had no gain for `attempts` attempts or `minutes`; once per plateau."""
    if b.plateau or b.state != ACTIVE or b.since_gain == 0:
        return None
    since = ((now or time.time()) - b.last_gain_ts) / 60 if b.last_gain_ts else 0.0
    if b.since_gain >= attempts or since >= minutes:
        return ev.PlateauDetected(branch=b.name, attempts_since_gain=b.since_gain,
                                  minutes_since_gain=round(since, 2), best_us=b.best_us)
    return None


# -- names -------------------------------------------------------------------------------------
BRANCH_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}(/[A-Za-z0-9][A-Za-z0-9._-]{0,62})?$")


def branch_name(task: str, family: str) -> str:
    return f"{task}/{family.replace('_', '-')}"


def resolve_branch(state: SessionState, name: str | None) -> str:
    """A branch given as `qr/cholqr`, `cholqr` or its family name; BeamError names the known ones."""
    if not name:
        raise BeamError("no branch given")
    if name in state.branches:
        return name
    suffix = [b.name for b in state.branches.values() if b.name.split("/", 1)[-1] in (name, name.replace("_", "-"))]
    family = [b.name for b in state.branches.values() if b.family == name]
    for matches in (suffix, family):
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise BeamError(f"branch {name!r} is ambiguous: {', '.join(matches)}")
    known = ", ".join(sorted(state.branches)) or "none yet"
    raise BeamError(f"no branch {name!r} (branches: {known})")


# -- commands ----------------------------------------------------------------------------------
class Beam:
    """Branch commands, applied to the session through events (and git, for fork)."""

    def __init__(self, state: SessionState, repo: SessionRepo, emit: Emit, task: str):
        self.state = state
        self.repo = repo
        self.emit = emit
        self.task = task

    def _live(self, name: str) -> Branch:
        b = self.state.branches[resolve_branch(self.state, name)]
        if b.state == KILLED:
            raise BeamError(f"branch {b.name} was killed")
        return b

    def pause(self, name: str, reason: str = "", steering_id: str | None = None) -> str:
        b = self._live(name)
        if b.state == PAUSED:
            return f"{b.name} was already paused"
        self.emit(ev.BranchStateChanged(branch=b.name, state=PAUSED, reason=reason, steering_id=steering_id))
        return f"paused {b.name}"

    def resume(self, name: str, steering_id: str | None = None) -> str:
        b = self._live(name)
        if b.state == ACTIVE:
            return f"{b.name} was already active"
        self.emit(ev.BranchStateChanged(branch=b.name, state=ACTIVE, reason="resumed", steering_id=steering_id))
        return f"resumed {b.name}"

    def kill(self, name: str, steering_id: str | None = None) -> str:
        b = self._live(name)
        self.emit(ev.BranchStateChanged(branch=b.name, state=KILLED, reason="killed", steering_id=steering_id))
        return f"killed {b.name} (its commits stay in git)"

    def focus(self, name: str | None, steering_id: str | None = None) -> str:
        if name is None or name in ("off", "none", "-"):
            self.emit(ev.FocusChanged(branch=None, steering_id=steering_id))
            return "unfocused: every active branch is scheduled"
        b = self._live(name)
        self.emit(ev.FocusChanged(branch=b.name, steering_id=steering_id))
        extra = "" if b.state == ACTIVE else f" (it is {b.state}: nothing runs until it is resumed)"
        return f"focused on {b.name}{extra}"

    def fork(self, spec: str, new_name: str, steering_id: str | None = None) -> str:
        """`B`, `B@<iteration>` or `B@<sha>` to a new branch; its measurement comes along when known."""
        source, _, at = spec.partition("@")
        src = self.state.branches[resolve_branch(self.state, source)]
        name = new_name if "/" in new_name else f"{self.task}/{new_name}"
        if not BRANCH_RE.match(name):
            raise BeamError(f"branch name {new_name!r}: use letters, digits, '.', '_', '-' (and one '/')")
        if name in self.state.branches or self.repo.head(name):
            raise BeamError(f"branch {name} already exists")
        us, se = src.best_us, src.best_se_us
        if not at:
            sha = src.head_sha
        elif at.isdigit() and (attempt := self.state.attempt(int(at))) is not None:
            sha = self.repo.attempt(int(at)) or attempt.sha
            if not sha:
                raise BeamError(f"attempt #{at} has no commit yet")
            us, se = (attempt.geomean_us, None) if attempt.verdict in ("accepted", "rejected") else (None, None)
        else:
            sha = self.repo.resolve(at) or ""
            if not sha:
                raise BeamError(f"{at!r} is neither an attempt number nor a commit of this session")
            known = next((a for a in self.state.attempts if a.sha == sha), None)
            if sha == src.head_sha:
                pass
            elif known is not None and known.verdict in ("accepted", "rejected"):
                us, se = known.geomean_us, None
            else:
                us, se = None, None
        self.repo.create_branch(name, sha)
        self.emit(ev.BranchCreated(branch=name, family=src.family, sha=sha, source=f"fork of {src.name}@{sha[:10]}",
                                   parent_branch=src.name, geomean_us=us, geomean_se_us=se))
        return f"forked {src.name}@{sha[:10]} as {name}"
