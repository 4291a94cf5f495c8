"""The `command` proposer: an external coding agent (e.g. `codex exec --full-auto`, `claude -p`) edits the file.

It runs in a throwaway git worktree of the branch head, gets the prompt on stdin, has a time
limit (its whole process group is killed past it), and its output is the transcript. The
proposal is whatever it left in submission.py. The tool keeps the environment it needs
(its own API key); only the candidate's evaluation runs scrubbed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from agent.config import RunConfig
from agent.proposers.base import Proposal, ProposalContext
from agent.proposers.prompt import build_prompt
from agent.vcs import CANDIDATE_FILE

OUTPUT_LIMIT = 256 * 1024


class CommandProposer:
    name = "command"
    prefetch = True

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def propose(self, ctx: ProposalContext, cancel: threading.Event | None = None) -> Proposal:
        started = time.monotonic()
        cancel = cancel or threading.Event()
        if ctx.worktree is None or ctx.workdir is None:
            return Proposal(None, error="no worktree available for the command proposer", transient=True)
        prompt = build_prompt(ctx, self.cfg.history, for_command=True)
        # unique: a discarded prefetch for the same iteration may still be tearing its own down
        path = ctx.workdir / f"worktree-{time.time_ns()}"
        with ctx.worktree(path) as wt:
            output, code, status = self._run(Path(wt), prompt, cancel, ctx.workdir)
            target = Path(wt) / CANDIDATE_FILE
            new = target.read_text(errors="replace") if target.is_file() else None
        transcript = f"$ {self.cfg.command}\n----- prompt (stdin) -----\n{prompt}\n----- output -----\n{output}\n"
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        summary = (lines[-1][:120] if lines else "") or "external agent edit"
        duration = time.monotonic() - started
        if status:
            return Proposal(None, summary=summary, transcript=transcript + f"----- {status}\n", error=status,
                            transient=code in (126, 127) or status == "aborted", duration_s=duration)
        if new is None:
            return Proposal(None, summary=summary, transcript=transcript, error=f"the command removed {CANDIDATE_FILE}",
                            duration_s=duration)
        if new == ctx.code:
            return Proposal(None, summary=summary, transcript=transcript,
                            error=f"the command left {CANDIDATE_FILE} unchanged", duration_s=duration)
        return Proposal(new, summary=summary, transcript=transcript, duration_s=duration)

    def _run(self, cwd: Path, prompt: str, cancel: threading.Event, record_dir: Path) -> tuple[str, int | None, str]:
        """(output, exit code, failure description or "")."""
        try:
            proc = subprocess.Popen(str(self.cfg.command), shell=True, cwd=cwd, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return "", 127, f"cannot start the command: {exc}"
        record = _record(record_dir, proc.pid)
        try:
            return self._follow(proc, prompt, cancel)
        finally:
            _kill_group(proc)   # whatever it left running in its group (a server, a watcher) goes too
            record.unlink(missing_ok=True)

    def _follow(self, proc: subprocess.Popen, prompt: str, cancel: threading.Event) -> tuple[str, int | None, str]:
        chunks: list[bytes] = []
        size = [0]

        def drain() -> None:
            assert proc.stdout is not None
            while chunk := proc.stdout.read1(65536):  # type: ignore[attr-defined]  # a BufferedReader
                size[0] += len(chunk)
                chunks.append(chunk)
                while sum(len(c) for c in chunks) > OUTPUT_LIMIT and len(chunks) > 1:
                    chunks.pop(0)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            assert proc.stdin is not None
            proc.stdin.write(prompt.encode())
            proc.stdin.close()
        except OSError:
            pass  # it exited without reading its prompt; its exit code tells
        deadline = time.monotonic() + self.cfg.command_timeout_s
        status = ""
        while proc.poll() is None:
            if cancel.is_set():
                status = "aborted"
            elif time.monotonic() > deadline:
                status = f"the command ran past its {self.cfg.command_timeout_s:g} s limit and was killed"
            if status:
                _kill_group(proc)
                break
            time.sleep(0.05)
        code = proc.wait()
        reader.join(2)
        output = b"".join(chunks).decode("utf-8", "replace")
        if size[0] > OUTPUT_LIMIT:
            output = f"[... {size[0] - len(output)} earlier bytes dropped]\n" + output
        if not status and code != 0:
            status = f"the command exited with code {code}" + (" (not found?)" if code == 127 else "")
        return output, code, status


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- orphans -------------------------------------------------------------------------------------
# A running command is recorded as work/<iteration>/command.<pgid>.pid ("pgid start-time"), so that
# after the agent was killed (kill -9 leaves the command's own process group running, for up to its
# whole time limit) the next agent can end it, and nothing else that reused the number.

def _record(record_dir: Path, pgid: int) -> Path:
    path = record_dir / f"command.{pgid}.pid"
    try:
        path.write_text(f"{pgid} {_start_time(pgid)}\n")
    except OSError:
        pass   # best effort: only a later cleanup needs it
    return path


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _group_members(pgid: int, started: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and int(fields[19]) >= started:
            found.append(int(entry.name))
    return found


def kill_orphans(work_root: Path) -> list[str]:
    """End commands a dead agent left running under `work_root`; a line for each one ended."""
    ended = []
    for path in sorted(work_root.glob("*/command.*.pid")):
        try:
            pgid_text, started_text = path.read_text().split()[:2]
            pgid, started = int(pgid_text), int(started_text)
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        members = _group_members(pgid, started)
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if members:
            ended.append(f"process group {pgid} of {path.parent.name}: {len(members)} processes")
        path.unlink(missing_ok=True)
    return ended
