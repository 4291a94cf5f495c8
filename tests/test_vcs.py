"""The git record: a commit per attempt on top of the branch head, refs/attempts, messages that tell the story."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.vcs import AttemptRecord, CaseLine, SessionRepo, VcsError, parse_trailers


@pytest.fixture
def repo(tmp_path: Path) -> SessionRepo:
    r = SessionRepo.open_or_init(tmp_path / "repo", "Steer session t: task qr")
    yield r
    r.close()


def git(repo: SessionRepo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo.path, capture_output=True, text=True, check=True).stdout


def test_attempts_are_commits_on_the_head_and_accepted_ones_move_the_branch(repo: SessionRepo):
    seed = repo.commit("CONFIG = {'a': 1}\n", "seed\n", repo.root())
    repo.create_branch("qr/cholqr", seed)
    accepted = repo.commit("CONFIG = {'a': 2}\n", AttemptRecord("tune: a 1->2", 1, "qr/cholqr", "accepted",
                                                                ok=True, geomean_us=10.0).message(), seed)
    repo.mark_attempt(1, accepted)
    repo.move_branch("qr/cholqr", accepted, old=seed)
    rejected = repo.commit("CONFIG = {'a': 3}\n", AttemptRecord("tune: a 2->3", 2, "qr/cholqr", "rejected",
                                                                ok=True, geomean_us=11.0).message(), accepted)
    repo.mark_attempt(2, rejected)
    assert repo.head("qr/cholqr") == accepted
    assert repo.attempts() == {1: accepted, 2: rejected}
    assert git(repo, "rev-parse", f"{rejected}^").strip() == accepted
    assert repo.read(rejected) == "CONFIG = {'a': 3}\n"
    assert "-CONFIG = {'a': 2}" in repo.diff(accepted, rejected)
    # a stale expected old value refuses to move the branch
    with pytest.raises(VcsError):
        repo.move_branch("qr/cholqr", rejected, old=seed)


def test_the_message_has_summary_result_cases_and_trailers(repo: SessionRepo):
    rec = AttemptRecord("llm: fuse the panel update", 12, "qr/wy-triton", "accepted", reason="3.0% faster", ok=True,
                        geomean_us=123.4, geomean_se_us=0.5, speedup=1.52, baseline_us=187.6,
                        cases=[CaseLine("batch=20 n=32", 12.3, 0.1)], steering_ids=["s1", "s2"],
                        margin=0.0314, margin_case="batch=20 n=32")
    sha = repo.commit("x = 1\n", rec.message(), repo.root())
    log = git(repo, "log", "-1", "--format=%B", sha)
    assert log.splitlines()[0] == "llm: fuse the panel update"
    assert "Result: pass, geomean 123.40 µs ± 0.50 (1.520x vs baseline 187.60 µs)" in log
    assert "batch=20 n=32: 12.30 ± 0.10" in log
    assert "Accuracy: 3.1% of the checker's tolerance at most (batch=20 n=32)" in log
    assert parse_trailers(log) == {"Steer-Iteration": "12", "Steer-Branch": "qr/wy-triton",
                                   "Steer-Verdict": "accepted", "Steer-Steering": "s1, s2"}
    trailers = git(repo, "log", "-1", "--format=%(trailers:key=Steer-Verdict,valueonly)", sha).strip()
    assert trailers == "accepted"


def test_failed_attempt_message(repo: SessionRepo):
    rec = AttemptRecord("llm: bad idea", 3, "qr/x", "failed", reason="wrong", ok=False, error="wrong: mismatch at case 2")
    assert "Result: fail: wrong: mismatch at case 2" in rec.message() and "Accuracy" not in rec.message()
    assert "Steer-Steering: none" in rec.message()


def test_reopen_keeps_everything_and_show_checks_out_a_branch(repo: SessionRepo, tmp_path: Path):
    sha = repo.commit("print('hi')\n", "seed\n", repo.root())
    repo.create_branch("qr/a", sha)
    repo.show("qr/a")
    assert (tmp_path / "repo" / "submission.py").read_text() == "print('hi')\n"
    again = SessionRepo.open_or_init(tmp_path / "repo")
    assert again.root() == repo.root() and again.branches() == {"qr/a": sha}
    assert git(repo, "status", "--porcelain") == ""
    again.close()


def test_worktree_is_a_checkout_of_the_commit_and_is_removed(repo: SessionRepo, tmp_path: Path):
    sha = repo.commit("v = 1\n", "seed\n", repo.root())
    with repo.worktree(sha, tmp_path / "wt") as wt:
        assert (wt / "submission.py").read_text() == "v = 1\n"
        (wt / "submission.py").write_text("v = 2\n")
    assert not (tmp_path / "wt").exists()
    assert repo.read(sha) == "v = 1\n"


def test_resolve_and_missing_file(repo: SessionRepo):
    assert repo.resolve("no-such-ref") is None
    assert repo.resolve(repo.root()[:8]) == repo.root()
    with pytest.raises(VcsError):
        repo.read(repo.root())


# A process that records attempts in a session repo, gets a SIGINT sent to its whole process group
# (as a terminal's Ctrl-C is) once its git helpers run, and records more: it prints whether every
# commit worked and which recoveries it needed, as JSON.
CTRL_C = r"""
import json, signal, sys, time
from pathlib import Path
from agent.vcs import SessionRepo
seen = []
signal.signal(signal.SIGINT, lambda *a: seen.append("SIGINT"))
repo = SessionRepo.open_or_init(Path(sys.argv[1]))
recoveries = []
repo.on_recovery = lambda action, detail: recoveries.append(action)
sha = repo.commit("x = 1\n", "first", repo.root())
assert repo.read(sha) == "x = 1\n"   # the cat-file helpers are running now
print("ready", flush=True)
deadline = time.time() + 20
while not seen and time.time() < deadline:
    time.sleep(0.05)
time.sleep(0.3)   # a helper killed by the signal has exited by now
sha2 = repo.commit("x = 2\n", "second", sha)
print(json.dumps({"signal": seen, "read": repo.read(sha2), "recoveries": recoveries}), flush=True)
"""


def test_ctrl_c_to_the_process_group_leaves_the_git_helpers_running(tmp_path: Path):
    """The terminal sends Ctrl-C to the whole foreground group; the git helpers must not die of it,
    so the commits a stopping run still makes need no recovery."""
    import json
    import os
    import signal
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C, str(tmp_path / "repo")], cwd=root, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"signal": ["SIGINT"], "read": "x = 2\n", "recoveries": []}, err
