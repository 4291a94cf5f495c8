"""Detached agents: start one in its own process session, and stop one through the pid in agent.lock."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent.harness.task import REPO_ROOT
from agent.session import Session

LOCK_WAIT_S = 60.0   # a successor waits this long for its predecessor to let go of agent.lock


def spawn_detached(root: Path, name: str, extra_args: list[str] | None = None) -> int:
    """Start `steer run NAME --headless` in a new process session; output to sessions/NAME/agent.log; the pid."""
    root = root.resolve()
    session = Session(root=root, name=name)
    cmd = [sys.executable, "-m", "agent.cli", "run", name, "--headless", "--root", str(root),
           "--lock-wait", str(LOCK_WAIT_S), "--run-mode", "detached", *(extra_args or [])]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"
    log = os.open(session.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                start_new_session=True, close_fds=True)
    finally:
        os.close(log)
    return proc.pid


def wait_started(session: Session, pid: int, timeout: float = 15.0) -> bool:
    """True once `pid` holds agent.lock; False if it exited or did not get there in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session.holder() == pid:
            return True
        if not _alive(pid):
            return False
        time.sleep(0.05)
    return False


def stop_agent(session: Session, timeout: float = 30.0, abort: bool = False) -> bool:
    """SIGTERM the agent holding the session (twice with `abort`: cancel the running evaluation too).

    True when no agent holds the session any more (also when none did); False if it still runs
    after `timeout` (it finishes its current evaluation first unless aborted).
    """
    pid = session.holder()
    if not pid or pid < 0:
        return pid is None
    try:
        os.kill(pid, signal.SIGTERM)
        if abort:
            time.sleep(0.3)
            os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session.holder() is None:
            return True
        time.sleep(0.1)
    return session.holder() is None


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)   # reap it if it is our child and exited
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
