"""Resume: make the git record and the events agree again after a crash, as if nothing had happened.

The order of writes in an iteration is: iteration_started → (artifacts) → commit object →
refs/attempts/<i> → branch ref (if accepted) → attempt_committed. A crash can stop it
anywhere, so on resume:
- an iteration whose commit exists in git but whose attempt_committed is missing gets that
  event rebuilt from the commit's trailers (and, if it was accepted, the branch moved);
- an iteration with no commit at all is committed now as failed ("interrupted");
- a branch ref that disagrees with the events is put back where the events say: the events
  hold the measurements, a ref moved by hand does not. The overruled position is kept under
  refs/steer/overruled/<branch>/<time> so nothing is lost;
- a command proposer's process group left running by a killed agent is ended;
- leftover git lock files (index.lock, a ref's .lock: only the agent writes this repo, and we hold
  agent.lock) are removed.
Each repair is a `recovery` event.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from agent import events as ev
from agent.proposers.command import kill_orphans
from agent.session import Session
from agent.state import SessionState
from agent.vcs import AttemptRecord, SessionRepo, VcsError

INTERRUPTED = "interrupted: the agent stopped during this iteration"


def reconcile(state: SessionState, repo: SessionRepo, session: Session, emit: Callable[[ev.Event], ev.Event]) -> None:
    for lock in repo.stale_locks():
        lock.unlink(missing_ok=True)
        action = "git index.lock removed" if lock.name == "index.lock" else "git lock removed"
        emit(ev.Recovery(action=action, detail=f"{lock} was left by a process that died"))
    orphans = kill_orphans(session.dir / "work")
    if orphans:
        emit(ev.Recovery(action="orphaned proposer command ended", detail="; ".join(orphans)))
    pruned = repo.prune_worktrees()
    if pruned:
        emit(ev.Recovery(action="stale git worktrees pruned", detail="; ".join(pruned)[:2000]))
    in_git = repo.attempts()
    for a in list(state.attempts):
        if a.sha:
            continue
        branch = state.branches.get(a.branch)
        sha = in_git.get(a.iteration)
        if sha:
            trailers = repo.trailers(sha)
            verdict = trailers.get("Steer-Verdict", "failed")
            if verdict == "accepted" and branch is not None and repo.head(a.branch) != sha:
                repo.move_branch(a.branch, sha)
            emit(ev.Recovery(action="attempt recovered from git",
                             detail=f"#{a.iteration}: commit {sha[:10]} ({verdict}) had no attempt_committed event"))
            emit(ev.AttemptCommitted(iteration=a.iteration, branch=a.branch, sha=sha, parent_sha=a.parent_sha,
                                     verdict=verdict, summary=a.summary, geomean_us=a.geomean_us, speedup=a.speedup,
                                     reason="recovered from git after a crash",
                                     ref=f"refs/heads/{a.branch}" if verdict == "accepted" else f"refs/attempts/{a.iteration}"))
            continue
        parent = a.parent_sha or (branch.head_sha if branch else repo.root())
        code = _candidate(session, a.iteration) or _read(repo, parent)
        record = AttemptRecord(summary=a.summary or "(interrupted)", iteration=a.iteration, branch=a.branch,
                               verdict="failed", reason=INTERRUPTED, error=INTERRUPTED, steering_ids=a.steering_ids)
        try:
            sha = repo.commit(code, record.message(), parent)
            repo.mark_attempt(a.iteration, sha)
        except VcsError as exc:
            emit(ev.ErrorEvent(where="recovery", message=str(exc), iteration=a.iteration))
            continue
        emit(ev.AttemptCommitted(iteration=a.iteration, branch=a.branch, sha=sha, parent_sha=parent, verdict="failed",
                                 summary=a.summary, reason=INTERRUPTED, ref=f"refs/attempts/{a.iteration}"))
    for b in state.branches.values():
        if not b.head_sha:
            continue
        head = repo.head(b.name)
        if head == b.head_sha:
            continue
        if head:
            keep = f"refs/steer/overruled/{b.name}/{int(time.time())}"
            repo.keep(keep, head)
            repo.move_branch(b.name, b.head_sha)
            emit(ev.Recovery(action="branch ref reset to the recorded head",
                             detail=f"{b.name} pointed at {head[:10]}, the events say {b.head_sha[:10]}; "
                                    f"the old position is kept as {keep}"))
        else:
            repo.create_branch(b.name, b.head_sha)
            emit(ev.Recovery(action="branch ref restored", detail=f"{b.name} was missing; set to {b.head_sha[:10]}"))


def _candidate(session: Session, iteration: int) -> str | None:
    path: Path = session.artifacts / str(iteration) / "candidate.py"
    try:
        return path.read_text()
    except OSError:
        return None


def _read(repo: SessionRepo, sha: str) -> str:
    try:
        return repo.read(sha)
    except VcsError:
        return ""
