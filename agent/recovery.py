"""What the loop does when the world misbehaves: a full disk, a moved branch ref, a sick GPU, a deleted session.

Each recovery is recorded as an event (`recovery`, or `error` while it waits), so a console shows
what happened. Kept apart from loop.py so the loop itself stays short.
"""
from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agent import events as ev
from agent import faults
from agent.harness.runner import discard_prestarted
from agent.vcs import VcsError

if TYPE_CHECKING:
    from agent.loop import Agent

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
DISK_RETRY_S = 30.0


class Recoverer:
    def __init__(self, agent: "Agent"):
        self.agent = agent

    # -- a full disk -----------------------------------------------------------------------------
    def append(self, event: ev.Event) -> None:
        """Append, waiting out a full disk: an event is never dropped (EventLog leaves no torn line)."""
        a = self.agent
        assert a.log is not None
        waited = False
        while True:
            try:
                a.log.append(event)
                return
            except OSError as exc:
                if exc.errno not in DISK_FULL or a._abort.is_set():
                    raise
                if not waited:
                    print(f"steer: disk full appending to {a.session.events_path}; waiting for space",
                          file=sys.stderr, flush=True)
                    waited = True
                a._abort.wait(DISK_RETRY_S)

    def last_words(self, event: ev.Event) -> None:
        """An event on the way out; if even that cannot be written (a full disk, aborted), say so on stderr."""
        try:
            self.agent.emit(event)
        except OSError as exc:
            print(f"steer: could not record {event.type}: {exc}", file=sys.stderr, flush=True)

    def write_artifact(self, path: Path, text: str) -> None:
        """Write an artifact; on a full disk, record it, pause, and retry until space returns (or an abort)."""
        a = self.agent
        rel = path.relative_to(a.session.dir) if path.is_relative_to(a.session.dir) else path
        wait = min(DISK_RETRY_S, a.cfg.error_backoff_s)
        started: float | None = None
        while True:
            try:
                faults.disk_full()
                write_private(path, text)
                break
            except OSError as exc:
                if exc.errno not in DISK_FULL or a._abort.is_set():
                    raise
                if started is None:
                    started = time.monotonic()
                    a.emit(ev.ErrorEvent(where="disk", message=f"cannot write {rel}: {exc.strerror}; the loop "
                                         f"pauses and retries every {wait:g} s until there is space"))
                a._abort.wait(wait)
        if started is not None:
            a.emit(ev.Recovery(action="disk space returned",
                               detail=f"{rel} written after {time.monotonic() - started:.1f} s of waiting"))

    # -- git -------------------------------------------------------------------------------------
    def move_branch(self, branch: str, sha: str, parent: str) -> None:
        """Move `branch` from `parent` (where the events say it is) to `sha`. If someone moved the ref
        meanwhile, the events win: the other position is kept under refs/steer/overruled/ and recorded."""
        a = self.agent
        assert a.repo is not None
        try:
            a.repo.move_branch(branch, sha, old=parent)
            return
        except VcsError:
            moved = a.repo.head(branch)
            if moved == parent:
                raise
        keep = ""
        if moved:
            keep = f"refs/steer/overruled/{branch}/{int(time.time())}"
            a.repo.keep(keep, moved)
            a.repo.move_branch(branch, sha, old=moved)
        else:
            a.repo.create_branch(branch, sha)
        where = moved[:10] if moved else "nowhere (deleted)"
        a.emit(ev.Recovery(action="branch ref reset to the recorded head",
                           detail=f"{branch} was moved to {where} outside the agent; the events say {parent[:10]}"
                                  + (f"; kept as {keep}" if keep else "")))

    # -- the GPU ---------------------------------------------------------------------------------
    def recheck_gpu(self, gpu: int | None) -> None:
        """After a CUDA fault: probe the GPU in a fresh process; while it is unhealthy, wait and probe again."""
        a = self.agent
        discard_prestarted()   # a waiting worker made its CUDA context before the fault
        name = f"GPU {gpu if gpu is not None else 0}"
        ok, detail = a.gpu_probe(gpu)
        a.emit(ev.Recovery(action="GPU re-checked after a CUDA fault",
                           detail=f"{name} {'healthy' if ok else 'unhealthy'}: {detail}"))
        if ok:
            return
        a.emit(ev.ErrorEvent(where="gpu", message=f"{name} failed its health probe ({detail}); no evaluation "
                             f"runs until it passes (probing every {a.cfg.error_backoff_s:g} s)"))
        while not ok and not (a._stop.is_set() or a._abort.is_set()):
            a._stop.wait(a.cfg.error_backoff_s)
            ok, detail = a.gpu_probe(gpu)
        if ok:
            a.emit(ev.Recovery(action="GPU healthy again", detail=f"{name}: {detail}"))

    # -- the session itself ------------------------------------------------------------------------
    def session_deleted(self) -> bool:
        """Someone removed the session directory: nothing recorded from now on would be seen by anyone."""
        a = self.agent
        assert a.log is not None
        if not a.log.unlinked() and a.session.toml.exists():
            return False
        print(f"steer: session {a.session.name} was deleted ({a.session.dir}); the agent stops",
              file=sys.stderr, flush=True)
        return True


def write_private(path: Path, text: str) -> None:
    """A file only its owner may read (transcripts, candidates, results)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
