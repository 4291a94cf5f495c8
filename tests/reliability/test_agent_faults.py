"""The agent killed or starved at chosen points: on resume nothing appended is lost and the record is whole.

Real detached agents (processes), real git, real signals. The points inside a commit and inside an
event append are reached through agent/faults.py (STEER_FAULT, off unless set): the window between
writing a git object and moving a ref is too short to hit with an outside kill.
kill -9 during an evaluation, SIGTERM and Ctrl-C, a second agent, a leftover index.lock and a ref
moved while no agent ran are proven in tests/test_detach.py and tests/test_loop.py (marked
`reliability` there).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import events as ev
from agent import faults
from agent.daemon import spawn_detached
from agent.loop import Agent, prepare_session
from agent.session import append_inbox
from agent.vcs import SessionRepo
from fixtures.agent_helpers import (REPO_ROOT, TINY, check_record, config, events, in_thread, of_type, steer,
                                    tiny_task, wait_for)
from fixtures.fake_openai import FakeOpenAI, Reply

pytestmark = pytest.mark.reliability

SEED = (TINY / "candidates" / "sleepy.py").read_text()
FASTER_EDIT = """Shorten the delay.
<<<<<<< SEARCH
CONFIG = {"delay_us": 1000, "copies": 1}  # the tuner rewrites this line
=======
CONFIG = {"delay_us": 100, "copies": 1}
>>>>>>> REPLACE
"""


def _wait_dead(pid: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid if not Path(f"/proc/{pid}").exists() else 0
        if done == pid:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"agent {pid} did not die within {timeout} s")


def _recoveries(items: list[ev.Event]) -> list[str]:
    return [e.action for e in of_type(items, ev.Recovery)]


def test_kill_9_during_a_proposal_then_resume(tmp_path: Path):
    """The model is thinking (the request is open at the endpoint) when the agent is killed."""
    server = FakeOpenAI(script=[Reply(FASTER_EDIT, delay=60.0)], default=Reply(FASTER_EDIT))
    try:
        root = tmp_path / "sessions"
        task = tiny_task(tmp_path, seeds=("sleepy",))
        s = prepare_session(root, "p", config(task, proposer="llm", model="fake", base_url=server.base_url,
                                              llm_retries=0, max_iterations=2))
        pid = spawn_detached(root, "p")
        deadline = time.monotonic() + 90
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.requests, "no proposal request arrived"
        os.kill(pid, signal.SIGKILL)
        _wait_dead(pid)
        before = s.events_path.read_bytes()
        items = events(s)
        assert [e.iteration for e in of_type(items, ev.IterationStarted)] == [1]
        assert not of_type(items, ev.ProposalMade) and not of_type(items, ev.AgentStopped)
        r = steer("run", "p", "--headless", root=root, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        server.close()
    assert s.events_path.read_bytes().startswith(before)
    items = events(s)
    st = check_record(s)
    first = [c for c in of_type(items, ev.AttemptCommitted) if c.iteration == 1][0]
    assert first.verdict == "failed" and "interrupted" in first.reason
    assert [a.iteration for a in st.attempts] == [1, 2] and st.attempts[1].verdict == "accepted"
    assert "stale agent.lock taken over" in _recoveries(items)


@pytest.mark.parametrize("point, recovered", [
    ("commit:object", []),                                   # a dangling object: the attempt is redone as failed
    ("commit:attempt-ref", ["attempt recovered from git"]),
    ("commit:refs", ["attempt recovered from git"]),
    ("append:attempt_committed", ["torn events line cut", "attempt recovered from git"]),
], ids=["commit:object", "commit:attempt-ref", "commit:refs", "append:attempt_committed"])
def test_kill_9_during_a_commit_or_an_event_append_then_resume(tmp_path: Path, monkeypatch, point, recovered):
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy",))
    s = prepare_session(root, "c", config(task, max_iterations=1))
    monkeypatch.setenv("STEER_FAULT", f"kill:{point}")
    pid = spawn_detached(root, "c")
    monkeypatch.delenv("STEER_FAULT")
    _wait_dead(pid)
    items = events(s)
    assert not of_type(items, ev.AgentStopped) and of_type(items, ev.EvalFinished), [e.type for e in items]
    assert not of_type(items, ev.AttemptCommitted)
    torn = not s.events_path.read_bytes().endswith(b"\n")
    assert torn == point.startswith("append:")
    kept = s.events_path.read_bytes().rsplit(b"\n", 1)[0] + b"\n"
    (s.repo / ".git" / "refs" / "heads" / "tiny" / "sleepy.lock").write_text("")   # git killed mid-update too
    r = steer("run", "c", "--headless", "--max-iterations", "2", root=root, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert s.events_path.read_bytes().startswith(kept)          # every complete line survived
    items = events(s)
    actions = _recoveries(items)
    assert set(recovered) <= set(actions), actions
    assert "stale agent.lock taken over" in actions and "git lock removed" in actions
    st = check_record(s)
    assert [a.iteration for a in st.attempts] == [1, 2]
    first = [c for c in of_type(items, ev.AttemptCommitted) if c.iteration == 1][0]
    if point == "commit:object":
        assert first.verdict == "failed" and "interrupted" in first.reason
    else:
        assert "recovered from git" in first.reason


def test_a_full_disk_pauses_the_loop_and_it_continues_when_space_returns(tmp_path: Path, monkeypatch):
    """ENOSPC comes from the fault point in the artifact writer while a flag file exists."""
    flag = tmp_path / "disk-is-full"
    monkeypatch.setattr(faults, "SPEC", f"disk-full:{flag}")
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy",))
    cfg = config(task, max_iterations=3, error_backoff_s=0.1)
    s = prepare_session(root, "full", cfg)
    agent = Agent(s, cfg)
    thread, result = in_thread(agent)
    wait_for(s, lambda es: any(isinstance(e, ev.BranchCreated) for e in es))
    flag.write_text("")
    paused = wait_for(s, lambda es: any(isinstance(e, ev.ErrorEvent) and e.where == "disk" for e in es))
    time.sleep(1.0)
    during = events(s)
    assert len(during) == len(paused), "the loop went on while the disk was full"
    flag.unlink()
    thread.join(120)
    assert result == ["budget"]
    items = events(s)
    error = [e for e in of_type(items, ev.ErrorEvent) if e.where == "disk"]
    back = [e for e in of_type(items, ev.Recovery) if e.action == "disk space returned"]
    assert len(error) == 1 and "No space left on device" in error[0].message and "pauses" in error[0].message
    assert len(back) == 1 and back[0].seq == error[0].seq + 1 and back[0].ts - error[0].ts >= 1.0
    st = check_record(s)
    assert [a.iteration for a in st.attempts] == [1, 2, 3]
    for i in (1, 2, 3):
        assert (s.artifacts / str(i) / "candidate.py").is_file() and (s.artifacts / str(i) / "eval.json").is_file()


def test_an_event_write_that_fails_midway_leaves_no_torn_line(tmp_path: Path):
    """A real short write: RLIMIT_FSIZE stops the line halfway (EFBIG, as ENOSPC would stop it)."""
    from agent.session import create_session
    s = create_session(tmp_path / "sessions", "fsize", {})
    code = f"""
import resource, signal, sys
sys.path.insert(0, {str(REPO_ROOT)!r})
from agent import events as ev
from agent.session import EventLog
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
log = EventLog(__import__("pathlib").Path({str(s.events_path)!r}))
log.append(ev.ErrorEvent(where="a", message="kept"))
size = __import__("os").path.getsize({str(s.events_path)!r})
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
try:
    log.append(ev.ErrorEvent(where="b", message="x" * 1000))
    print("NO ERROR")
except OSError as exc:
    print("FAILED", exc.errno)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
log.append(ev.ErrorEvent(where="c", message="after"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "FAILED 27" in out.stdout, out.stdout + out.stderr      # EFBIG
    items = events(s)
    assert [(e.seq, e.where) for e in items] == [(1, "a"), (2, "c")]
    assert s.events_path.read_bytes().count(b"\n") == 2


def test_a_branch_ref_moved_during_the_run_is_put_back_and_recorded(tmp_path: Path):
    """The external coding agent itself moves the branch (it works in a worktree of the session repo)."""
    script = tmp_path / "mover.py"
    script.write_text("""
import pathlib, subprocess
root = subprocess.run(["git", "rev-parse", "refs/steer/root"], capture_output=True, text=True).stdout.strip()
subprocess.run(["git", "update-ref", "refs/heads/tiny/sleepy", root], check=True)
f = pathlib.Path("submission.py")
f.write_text(f.read_text().replace('"delay_us": 1000', '"delay_us": 100'))
print("cut the delay to 100 us (and moved the branch)")
""")
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy",))
    cfg = config(task, proposer="command", command=f"{sys.executable} {script}", max_iterations=1)
    s = prepare_session(root, "moved", cfg)
    assert Agent(s, cfg).run() == "budget"
    items = events(s)
    commit = of_type(items, ev.AttemptCommitted)[0]
    assert commit.verdict == "accepted", commit.reason
    reset = [e for e in of_type(items, ev.Recovery) if e.action == "branch ref reset to the recorded head"]
    assert len(reset) == 1 and "refs/steer/overruled/tiny/sleepy/" in reset[0].detail
    repo = SessionRepo.open_or_init(s.repo)
    try:
        assert repo.head("tiny/sleepy") == commit.sha
        kept = repo.refs("refs/steer/overruled")
        assert list(kept.values()) == [repo.root()]
    finally:
        repo.close()
    check_record(s)


def test_a_deleted_session_stops_its_idle_agent(tmp_path: Path):
    """Deleted while the agent waits for steering (its only branch paused): it notices and exits, recreating nothing.
    (Deleted during an evaluation, the agent stops at its next write into the session.)"""
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy",))
    s = prepare_session(root, "gone", config(task, max_iterations=500))
    append_inbox(s, "/pause sleepy")
    pid = spawn_detached(root, "gone")
    wait_for(s, lambda es: any(isinstance(e, ev.ErrorEvent) and e.where == "scheduler" for e in es), timeout=120)
    shutil.rmtree(s.dir)
    _wait_dead(pid, timeout=30)
    assert not s.dir.exists(), "the agent recreated part of the deleted session"
    assert steer("ls", root=root).returncode == 0


CUDA_FAULT_SEED = '''"""A family whose second configuration faults like a broken kernel on a GPU."""
CONFIG = {"mode": "ok"}
SPACE = {"mode": ["ok", "fault"]}


def custom_kernel(data):
    if CONFIG["mode"] == "fault":
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    return data * 2
'''


def test_after_a_cuda_fault_the_gpu_is_probed_until_healthy(tmp_path: Path):
    """The loop's side of the GPU scenarios: a `cuda` result triggers a probe in a fresh process; an unhealthy
    GPU holds the loop until a probe passes. No GPU here: the probe is the one stand-in (the H200 runs in
    docs/reliability.md used the real one)."""
    task = tiny_task(tmp_path, seeds=("sleepy",))
    (task / "candidates" / "sleepy.py").write_text(CUDA_FAULT_SEED)
    cfg = config(task, device="cuda", max_iterations=2, error_backoff_s=0.1)
    s = prepare_session(tmp_path / "sessions", "gpu", cfg)
    answers = iter([(True, "Fake GPU")] + [(False, "probe failed: unspecified launch failure")] * 3)
    probes: list[int | None] = []

    def probe(gpu: int | None) -> tuple[bool, str]:
        probes.append(gpu)
        return next(answers, (True, "Fake GPU"))
    agent = Agent(s, cfg)
    agent.gpu_probe = probe
    assert agent.run() == "budget"
    items = events(s)
    first = of_type(items, ev.EvalFinished)[0]
    assert first.error_class == "cuda"
    actions = [(e.action, e.detail) for e in of_type(items, ev.Recovery)]
    assert actions[0] == ("GPU re-checked after a CUDA fault",
                          "GPU 0 unhealthy: probe failed: unspecified launch failure")
    assert actions[1] == ("GPU healthy again", "GPU 0: Fake GPU")
    assert [e.where for e in of_type(items, ev.ErrorEvent)][:1] == ["gpu"]
    assert len(probes) == 5           # the session's first probe, then 3 failing and 1 passing
    check_record(s)


def test_dead_git_helpers_are_restarted_and_the_repair_recorded(tmp_path: Path):
    """What a Ctrl-C does to gitpython's long-lived `git cat-file` children (seen on the H200), on purpose:
    every kind of repository call still works, and each repair reaches the agent as a recovery."""
    repo = SessionRepo.open_or_init(tmp_path / "repo")
    repaired: list[tuple[str, str]] = []
    repo.on_recovery = lambda action, detail: repaired.append((action, detail))

    def kill_helpers() -> None:
        for line in subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(os.getpid())], capture_output=True,
                                   text=True).stdout.splitlines():
            pid, args = line.split(None, 1)
            if "cat-file" in args:
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.1)
    try:
        sha = repo.commit(SEED, "seed\n", repo.root())
        for call in (lambda: repo.read(sha), lambda: repo.message(sha), lambda: repo.commit(SEED + "#\n", "2\n", sha)):
            call()                      # the helpers exist
            kill_helpers()
            assert call()               # and are restarted after they died
    finally:
        repo.close()
    assert [action for action, _ in repaired] == ["git helpers restarted"] * 3
    assert "Broken pipe" in repaired[0][1]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_kill_9_during_a_command_proposal_leaves_no_orphan_after_resume(tmp_path: Path):
    """The external coding agent runs in its own process group, so `kill -9` of the agent leaves it running
    (for up to its whole time limit). The next agent ends it."""
    marker = tmp_path / "thinking"
    script = tmp_path / "slow_agent.py"
    script.write_text(f"""
import os, pathlib, time
pathlib.Path({str(marker)!r}).write_text(str(os.getpid()))
time.sleep(600)
""")
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy",))
    s = prepare_session(root, "orphan", config(task, proposer="command", command=f"{sys.executable} {script}",
                                               max_iterations=1))
    pid = spawn_detached(root, "orphan")
    deadline = time.monotonic() + 90
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    thinker = int(marker.read_text())
    os.kill(pid, signal.SIGKILL)
    _wait_dead(pid)
    assert _alive(thinker), "the command died with the agent (then there is nothing to test)"
    try:
        r = steer("run", "orphan", "--headless", root=root, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not _alive(thinker), "the orphaned command still runs"
    finally:
        if _alive(thinker):
            os.kill(thinker, signal.SIGKILL)
    items = events(s)
    ended = [e for e in of_type(items, ev.Recovery) if e.action == "orphaned proposer command ended"]
    assert len(ended) == 1 and "of 1:" in ended[0].detail
    check_record(s)
