"""The agent loop on the tiny task with the tune proposer: the record it leaves, budgets, hooks, resume."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import events as ev
from agent.config import RunConfig
from agent.harness.task import TaskError, load_task
from agent.loop import Agent, prepare_session
from agent.session import EventLog, SessionError, create_session
from agent.vcs import AttemptRecord, SessionRepo
from fixtures.agent_helpers import check_record, config, events, of_type, state, steer, tiny_task


def git_log(session) -> str:
    return subprocess.run(["git", "log", "--all", "--format=%H%n%B%n--end--"], cwd=session.repo, capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.slow
def test_a_tune_run_leaves_a_complete_record(tmp_path: Path):
    task = tiny_task(tmp_path, seeds=("sleepy", "steady", "bare"), baseline=True)
    hook_out = tmp_path / "hook.jsonl"
    hook = f"{sys.executable} -c \"import sys; open({str(hook_out)!r}, 'a').write(sys.stdin.read() + '\\n')\""
    cfg = config(task, beam=3, max_iterations=4, plateau_attempts=1, proposal_fail_limit=1, on_event=hook)
    s = prepare_session(tmp_path / "sessions", None, cfg)
    lines: list[str] = []
    assert Agent(s, cfg, echo=lines.append).run() == "budget"
    items = events(s)
    types = [e.type for e in items if e.type != "eval_progress"]
    assert types[:2] == ["session_started", "baseline_measured"] and types[-1] == "agent_stopped"
    st = check_record(s)
    base = st.baseline_us
    assert base and 900 < base < 3000
    created = of_type(items, ev.BranchCreated)
    assert [b.branch for b in created] == ["tiny/bare", "tiny/sleepy", "tiny/steady"]   # seeds in name order
    assert all(b.geomean_us for b in created) and created[1].geomean_se_us is not None
    # bare has no CONFIG: its first attempt fails and, with a limit of 1, the branch is paused with the reason
    assert st.branches["tiny/bare"].state == "paused" and "CONFIG" in st.branches["tiny/bare"].state_reason
    # every iteration: started, proposed, (evaluated), committed; artifacts on disk
    for a in st.attempts:
        d = s.artifacts / str(a.iteration)
        assert (d / "transcript.txt").is_file() and (d / "diff.patch").is_file()
        if a.proposal_ok:
            assert (d / "eval.json").is_file() and (d / "candidate.py").is_file()
            assert json.loads((d / "eval.json").read_text())["task"] == "tiny"
    progress = [e.detail for e in of_type(items, ev.EvalProgress) if e.iteration >= 1]
    assert "stage 4/4" in progress and "benchmark 1/1" in progress
    finished = of_type(items, ev.EvalFinished)
    assert all(len(f.result.get("stderr_tail", "")) <= 2100 for f in finished)
    assert all(f.speedup == pytest.approx(base / f.geomean_us) for f in finished if f.ok)
    # git log alone tells the story
    log = git_log(s)
    for a in st.attempts:
        assert f"Steer-Iteration: {a.iteration}\nSteer-Branch: {a.branch}\nSteer-Verdict: {a.verdict}" in log
    assert "vs baseline" in log and "Cases (mean µs ± stderr):" in log
    # plateau (K=1) on a branch with a non-gain, and the hook got it, the budget and the stop
    assert of_type(items, ev.PlateauDetected)
    assert of_type(items, ev.BudgetReached)[0].kind == "iterations"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "agent_stopped" not in (hook_out.read_text() if hook_out.exists() else ""):
        time.sleep(0.1)
    hooked = [json.loads(x)["type"] for x in hook_out.read_text().splitlines() if x.strip()]
    assert {"plateau", "budget_reached", "agent_stopped"} <= set(hooked)
    assert any(line.startswith("#1 ") for line in lines)


@pytest.mark.reliability
@pytest.mark.slow
def test_resume_continues_numbering_and_reconciles_git_and_events(tmp_path: Path):
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy",))
    s = prepare_session(root, "r", config(task, max_iterations=2))
    assert Agent(s).run() == "budget"
    st = state(s)
    head = st.branches["tiny/sleepy"].head_sha
    # a crash after the commit of #3 but before its event ...
    log = EventLog(s.events_path)
    log.append(ev.IterationStarted(iteration=3, branch="tiny/sleepy", parent_sha=head))
    log.close()
    repo = SessionRepo.open_or_init(s.repo)
    code = repo.read(head)
    sha3 = repo.commit(code + "\n# 3\n", AttemptRecord("by hand", 3, "tiny/sleepy", "rejected").message(), head)
    repo.mark_attempt(3, sha3)
    # ... a branch moved by hand, a leftover index.lock, and a torn line
    repo.move_branch("tiny/sleepy", repo.root())
    (s.repo / ".git" / "index.lock").write_text("")
    repo.close()
    with open(s.events_path, "ab") as f:
        f.write(b'{"seq": 999, "type": "iteration_sta')
    # resume with a new budget given explicitly: the rest of the stored config stays
    assert steer("run", "r", "--headless", "--max-iterations", "4", root=root).returncode == 0
    items = events(s)
    actions = [e.action for e in of_type(items, ev.Recovery)]
    assert {"torn events line cut", "git index.lock removed", "attempt recovered from git",
            "branch ref reset to the recorded head"} <= set(actions)
    resumed = of_type(items, ev.SessionResumed)[0]
    assert resumed.next_iteration == 4 and resumed.config == {"max_iterations": 4}
    c3 = [c for c in of_type(items, ev.AttemptCommitted) if c.iteration == 3][0]
    assert c3.sha == sha3 and c3.verdict == "rejected"
    st = check_record(s)
    assert [a.iteration for a in st.attempts] == [1, 2, 3, 4]
    assert RunConfig.from_toml(s.config()).max_iterations == 4
    assert not (s.repo / ".git" / "index.lock").exists()


def test_prepare_session_names_validates_and_merges_on_resume(tmp_path: Path):
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path)
    s = prepare_session(root, None, config(task, beam=2, seed=5))
    assert len(s.name) >= 15 and s.name[:8].isdigit()
    stored = RunConfig.from_toml(s.config())
    assert (stored.task, stored.beam, stored.seed, stored.device) == (str(task), 2, 5, "cpu")
    again = prepare_session(root, s.name, RunConfig(max_cost=3.0, explicit=frozenset({"max_cost"})))
    merged = RunConfig.from_toml(again.config())
    assert (merged.max_cost, merged.beam, merged.seed) == (3.0, 2, 5)
    llm = prepare_session(root, "l", config(task, proposer="llm", model="m1"))
    prepare_session(root, "l", RunConfig(proposer="llm", explicit=frozenset({"proposer"})))   # the model is stored
    assert RunConfig.from_toml(llm.config()).model == "m1"
    other = tiny_task(tmp_path / "x")
    with pytest.raises(SessionError, match="cannot change the task"):
        prepare_session(root, s.name, RunConfig(task=str(other), explicit=frozenset({"task"})))
    with pytest.raises(SessionError, match="no such directory"):
        prepare_session(root, "n", RunConfig(task=str(tmp_path / "nope")))
    assert prepare_session(root, "q", RunConfig()).config()["task"] == "qr"     # the bundled default, by name
    assert RunConfig.from_toml(RunConfig(gpus=[0, 1], price_in_per_mtok=2.0).to_toml()).gpus == [0, 1]


@pytest.mark.slow
def test_families_pick_the_seeds_the_beam_starts_from_and_a_resume_can_add_one(tmp_path: Path):
    """--families starts exactly the named seeds, in the order given, whatever --beam says; a name
    the task has no seed for is refused before anything runs; a resume naming one more adds it."""
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy", "steady", "bare"))
    with pytest.raises(SessionError, match=r"task tiny has no seed family 'nope' \(its seeds: bare, sleepy, steady\)"):
        prepare_session(root, "x", config(task, families=["steady", "nope"]))
    assert not (root / "x").exists()
    cfg = config(task, beam=1, families=["steady", "sleepy"], max_iterations=0)
    s = prepare_session(root, "f", cfg)
    assert RunConfig.from_toml(s.config()).families == ["steady", "sleepy"]
    assert Agent(s, cfg).run() == "budget"
    assert [b.branch for b in of_type(events(s), ev.BranchCreated)] == ["tiny/steady", "tiny/sleepy"]
    more = RunConfig(families=["steady", "sleepy", "bare"], explicit=frozenset({"families"}))
    s = prepare_session(root, "f", more)
    merged = RunConfig.from_toml(s.config())
    assert merged.families == ["steady", "sleepy", "bare"] and merged.max_iterations == 0
    assert Agent(s, merged).run() == "budget"
    assert [b.branch for b in of_type(events(s), ev.BranchCreated)] == ["tiny/steady", "tiny/sleepy", "tiny/bare"]
    with pytest.raises(SessionError, match="no seed family 'gone'"):
        prepare_session(root, "f", RunConfig(families=["gone"], explicit=frozenset({"families"})))
    qr = load_task("qr")  # a family by its branch's spelling too
    assert [p.name for p in qr.seeds_named(["wy-blocked", "superpanel"])] == ["wy_blocked.py", "superpanel.py"]
    with pytest.raises(TaskError, match="the same seed family is named twice in wy_blocked,wy-blocked"):
        qr.seeds_named(["wy_blocked", "wy-blocked"])


def test_command_line_errors_are_one_line(tmp_path: Path):
    root = tmp_path / "sessions"
    create_session(root, "s", {"task": "qr"})
    cases = [(["status", "nope"], "no session 'nope'"),
             (["say", "s", "/frob"], "unknown command /frob"),
             (["say", "s", "hi", "--branch", "x"], "no branch 'x'"),
             (["run", "--proposer", "llm"], "needs --model"),
             (["run", "--proposer", "command"], "needs --command"),
             (["run", "--task", str(tmp_path / "none")], "no such directory"),
             (["export", "s"], "no correct kernel yet"),
             (["run", "--gpus", "a,b"], "--gpus takes comma-separated"),
             (["run", "--families", "wy_blocked,nope"], "task qr has no seed family 'nope' (its seeds: cholqr, "),
             (["run", "--families", ","], "--families takes comma-separated seed names"),
             (["run", "--families", "wy_triton,wy_triton.py"], "--families names a family twice"),
             (["run", "--max-margin", "1.5"], "--max-margin is a fraction of the checker's tolerance")]
    for args, expected in cases:
        r = steer(*args, root=root)
        assert r.returncode == 2, (args, r.stderr)
        assert expected in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = steer("ls", root=root)
    assert r.returncode == 0 and "s" in r.stdout


MARGIN_CHECK = """

def check_margin(data, output):
    \"\"\"(ok, message, margin): each element may be 1.0 off; margin is how much of that was used.\"\"\"
    if not isinstance(output, torch.Tensor) or output.shape != data.shape:
        return False, "wrong shape", float("inf")
    used = float((output - 2 * data).abs().max())
    return used <= 1.0, "" if used <= 1.0 else "mismatch", used
"""
OFF_BY_HALF = """
import time
CONFIG = {"delay_us": 2000}
SPACE = {"delay_us": [100, 2000]}
def custom_kernel(data):
    time.sleep(CONFIG["delay_us"] * 1e-6)
    return data * 2 + 0.5
"""


@pytest.mark.slow
def test_max_margin_rejects_a_faster_kernel_too_close_to_the_tolerance(tmp_path: Path):
    """A task with check_margin: a 20x faster kernel whose outputs use half the tolerance is accepted
    without a limit and rejected, with the reason in the commit, under --max-margin 0.3."""
    task = tiny_task(tmp_path, seeds=("sleepy",))
    (task / "reference.py").write_text((task / "reference.py").read_text() + MARGIN_CHECK)
    (task / "candidates" / "sleepy.py").write_text(OFF_BY_HALF)
    verdicts = {}
    for limit in (None, 0.3):
        s = prepare_session(tmp_path / "sessions", f"limit-{limit}", config(task, max_iterations=1, max_margin=limit))
        assert Agent(s).run() in ("budget", "exhausted")
        committed = of_type(events(s), ev.AttemptCommitted)[-1]
        assert committed.iteration == 1 and committed.margin == pytest.approx(0.5)
        verdicts[limit] = committed.verdict, committed.reason
        assert "Accuracy: 50% of the checker's tolerance at most" in git_log(s)
        check_record(s)
    assert verdicts[None][0] == "accepted"
    assert verdicts[0.3][0] == "rejected" and verdicts[0.3][1].startswith(
        "its outputs used 50% of the checker's tolerance (size=")
    assert "over this session's limit of 30% (--max-margin); otherwise: " in verdicts[0.3][1]


def test_export_writes_the_best_kernel_and_refuses_stream(tmp_path: Path):
    root = tmp_path / "sessions"
    s = create_session(root, "x", {"task": "qr"})
    repo = SessionRepo.open_or_init(s.repo)
    good = repo.commit("def custom_kernel(d):\n    return d\n", "seed\n", repo.root())
    bad = repo.commit("import torch\ns = torch.cuda.Stream()\ndef custom_kernel(d):\n    return d\n", "seed\n",
                      repo.root())
    repo.create_branch("qr/good", good)
    repo.create_branch("qr/bad", bad)
    repo.close()
    log = EventLog(s.events_path)
    log.append(ev.BaselineMeasured(geomean_us=100.0))
    log.append(ev.BranchCreated(branch="qr/good", family="good", sha=good, geomean_us=50.0))
    log.append(ev.BranchCreated(branch="qr/bad", family="bad", sha=bad, geomean_us=10.0))
    log.close()
    r = steer("export", "x", "-o", str(tmp_path / "out.py"), root=root)
    assert r.returncode == 2 and 'contains "stream" (line 2)' in r.stderr        # the best is qr/bad
    r = steer("export", "x", "--branch", "good", "-o", str(tmp_path / "out.py"), root=root)
    assert r.returncode == 0 and "2.000x" in r.stdout
    assert (tmp_path / "out.py").read_text() == "def custom_kernel(d):\n    return d\n"
    r = steer("status", "x", root=root)
    assert r.returncode == 0 and "qr/good" in r.stdout and "pending steering: none" in r.stdout


class TwoSlotAgent(Agent):
    """Two evaluation slots on the CPU: the code path `--gpus 0,1` takes on a GPU machine."""

    def _slots(self) -> list[int | None]:
        return [None, None]


@pytest.mark.slow
def test_two_evaluations_at_once_keep_the_record_consistent(tmp_path: Path):
    task = tiny_task(tmp_path, seeds=("sleepy", "steady"))
    s = prepare_session(tmp_path / "sessions", "par", config(task, max_iterations=4))
    assert TwoSlotAgent(s).run() == "budget"
    items = events(s)
    pos = {id(e): n for n, e in enumerate(items)}
    started = {e.iteration: e for e in of_type(items, ev.IterationStarted)}
    committed = {e.iteration: e for e in of_type(items, ev.AttemptCommitted)}
    # #2 started before #1 was committed, on the other branch: a branch runs on one slot at a time
    assert pos[id(started[2])] < pos[id(committed[1])]
    assert started[1].branch != started[2].branch
    for i in started:
        others = [j for j in started if j != i and started[j].branch == started[i].branch]
        for j in others:
            assert not (pos[id(started[i])] < pos[id(started[j])] < pos[id(committed[i])]), (i, j)
    check_record(s)
