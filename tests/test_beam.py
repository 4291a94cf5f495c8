"""The beam: the acceptance rule, scheduling without starvation, plateaus, and the branch commands."""
from __future__ import annotations

from pathlib import Path

import pytest

from agent import events as ev
from agent.beam import (Beam, BeamError, geomean_se, judge, noise_floor, pick_branch, plateau, recent_gain,
                        resolve_branch)
from agent.state import SessionState
from agent.vcs import SessionRepo


def make_state(*names: str) -> SessionState:
    st = SessionState()
    seq = 0
    for n in names:
        seq += 1
        st.apply(ev.BranchCreated(branch=f"qr/{n}", family=n, sha=f"{n}0", geomean_us=100.0, seq=seq, ts=1000.0))
    return st


def attempt(st: SessionState, branch: str, verdict: str, us: float | None = None, ts: float = 1000.0) -> None:
    i = st.iteration + 1
    st.apply(ev.IterationStarted(iteration=i, branch=branch, parent_sha=st.branches[branch].head_sha, ts=ts))
    st.apply(ev.AttemptCommitted(iteration=i, branch=branch, sha=f"{branch}{i}", parent_sha="", verdict=verdict,
                                 geomean_us=us, ts=ts))


def test_judge_needs_1_percent_or_2_standard_errors():
    assert judge(True, "", 99.5, 0.0, 100.0, 0.0).verdict == "rejected"      # 0.5% < 1%
    assert judge(True, "", 98.9, 0.0, 100.0, 0.0).verdict == "accepted"      # 1.1%
    # noisy measurements: 2 * sqrt(1^2 + 1^2) = 2.83 µs needed
    assert judge(True, "", 97.5, 1.0, 100.0, 1.0).verdict == "rejected"
    assert judge(True, "", 97.0, 1.0, 100.0, 1.0).verdict == "accepted"
    assert judge(True, "", 120.0, 0.0, 100.0, 0.0).reason.startswith("120.00 µs is slower")
    assert judge(False, "wrong: mismatch", None, None, 100.0, 0.0).verdict == "failed"
    assert judge(True, "", 500.0, None, None, None).verdict == "accepted"    # an unmeasured head: any pass wins
    # two timings of the candidate 4 µs apart: a 3% gain is within that run-to-run noise
    assert judge(True, "", 97.0, 0.0, 100.0, 0.0, spread=4.0).verdict == "rejected"
    assert judge(True, "", 95.0, 0.0, 100.0, 0.0, spread=4.0).verdict == "accepted"


def test_a_measured_noise_floor_raises_the_bar_and_is_named():
    # two timings of the same code, 100 and 80 µs: a no-op could look 20% faster than its head
    assert noise_floor([(100.0, 80.0), (50.0, 49.0)]) == pytest.approx(0.2)
    assert noise_floor([(100.0, 99.9)]) == 0.01          # never under the fixed 1%
    assert noise_floor([]) == 0.01
    assert judge(True, "", 85.0, 0.0, 100.0, 0.0).verdict == "accepted"          # 15% against 1%
    r = judge(True, "", 85.0, 0.0, 100.0, 0.0, floor=0.2)
    assert r.verdict == "rejected" and "20.00 µs, the session's noise floor of 20.0%" in r.reason, r.reason
    r = judge(True, "", 75.0, 0.0, 100.0, 0.0, floor=0.2)
    assert r.verdict == "accepted" and "noise floor of 20.0%" in r.reason, r.reason
    # the floor is named only when it is what the gain had to beat
    assert "noise floor" not in judge(True, "", 75.0, 0.0, 100.0, 0.0, spread=30.0, floor=0.2).reason
    assert "noise floor" not in judge(True, "", 99.5, 0.0, 100.0, 0.0).reason


def test_geomean_se_from_per_case_stderr():
    cases = [{"kind": "benchmark", "mean_us": 100.0, "stderr_us": 1.0},
             {"kind": "benchmark", "mean_us": 400.0, "stderr_us": 4.0},
             {"kind": "test", "mean_us": None}]
    # g = 200, relative se 1% each, sqrt(2 * 0.01^2) / 2 = 0.00707
    assert geomean_se(cases) == pytest.approx(200 * 0.0070711, rel=1e-3)
    assert geomean_se([]) is None


def test_round_robin_without_gains_and_paused_killed_skipped():
    st = make_state("a", "b", "c")
    order = []
    for _ in range(6):
        b = pick_branch(st)
        order.append(b)
        attempt(st, b, "rejected", 101.0)
    assert order == ["qr/a", "qr/b", "qr/c"] * 2
    st.apply(ev.BranchStateChanged(branch="qr/b", state="paused"))
    st.apply(ev.BranchStateChanged(branch="qr/c", state="killed"))
    assert {pick_branch(st) for _ in range(3)} == {"qr/a"}


def test_gainers_run_more_but_nobody_starves():
    st = make_state("a", "b", "c")
    counts = {"qr/a": 0, "qr/b": 0, "qr/c": 0}
    us = 100.0
    for _ in range(60):
        b = pick_branch(st)
        counts[b] += 1
        if b == "qr/a":
            us *= 0.95
            attempt(st, b, "accepted", us)
        else:
            attempt(st, b, "rejected", 100.0)
    assert recent_gain(st.branches["qr/a"]) > 0
    assert counts["qr/a"] > counts["qr/b"] * 2
    assert min(counts.values()) >= 5
    gaps = [i for i, a in enumerate(st.attempts) if a.branch == "qr/c"]
    assert max(b - a for a, b in zip(gaps, gaps[1:])) <= 12


def test_focus_and_exclusion():
    st = make_state("a", "b")
    st.apply(ev.FocusChanged(branch="qr/b"))
    assert pick_branch(st) == "qr/b"
    assert pick_branch(st, exclude={"qr/b"}) is None
    st.apply(ev.FocusChanged(branch=None))
    assert pick_branch(st, exclude={"qr/a"}) == "qr/b"


def test_plateau_once_per_plateau_by_attempts_and_by_time():
    st = make_state("a")
    b = st.branches["qr/a"]
    for _ in range(3):
        attempt(st, "qr/a", "rejected", 101.0)
    assert plateau(b, attempts=4, minutes=60, now=1000.0) is None
    attempt(st, "qr/a", "failed")
    found = plateau(b, attempts=4, minutes=60, now=1000.0)
    assert found is not None and found.attempts_since_gain == 4
    st.apply(found)
    attempt(st, "qr/a", "rejected", 101.0)
    assert plateau(b, attempts=4, minutes=60, now=1000.0) is None          # once per plateau
    attempt(st, "qr/a", "accepted", 90.0, ts=2000.0)                        # a gain ends it
    attempt(st, "qr/a", "rejected", 95.0, ts=2000.0)
    assert plateau(b, attempts=4, minutes=60, now=2000.0 + 30 * 60) is None
    assert plateau(b, attempts=4, minutes=60, now=2000.0 + 61 * 60).minutes_since_gain > 60


def test_resolve_branch_by_full_name_suffix_or_family():
    st = make_state("cholqr", "wy_triton")
    assert resolve_branch(st, "qr/cholqr") == "qr/cholqr"
    assert resolve_branch(st, "cholqr") == "qr/cholqr"
    assert resolve_branch(st, "wy_triton") == "qr/wy_triton"
    with pytest.raises(BeamError, match="no branch 'nope'"):
        resolve_branch(st, "nope")


@pytest.fixture
def beam(tmp_path: Path):
    repo = SessionRepo.open_or_init(tmp_path / "repo")
    st = SessionState()
    log: list[ev.Event] = []

    def emit(e: ev.Event) -> ev.Event:
        e.seq = len(log) + 1
        log.append(e)
        st.apply(e)
        return e
    sha = repo.commit("CONFIG = {'a': 1}\n", "seed\n", repo.root())
    repo.create_branch("qr/a", sha)
    emit(ev.BranchCreated(branch="qr/a", family="a", sha=sha, geomean_us=100.0, geomean_se_us=1.0))
    b = Beam(st, repo, emit, "qr")
    b.log = log  # type: ignore[attr-defined]
    yield b
    repo.close()


def test_commands_pause_resume_kill_focus(beam: Beam):
    assert beam.pause("a") == "paused qr/a"
    assert beam.state.branches["qr/a"].state == "paused"
    assert "already" in beam.pause("a")
    assert beam.resume("qr/a") == "resumed qr/a"
    assert beam.focus("a").startswith("focused on qr/a")
    assert beam.state.focus == "qr/a"
    assert beam.focus("off").startswith("unfocused")
    beam.kill("a")
    with pytest.raises(BeamError, match="was killed"):
        beam.resume("a")


def test_fork_from_head_from_an_attempt_and_errors(beam: Beam):
    repo, st = beam.repo, beam.state
    head = st.branches["qr/a"].head_sha
    assert beam.fork("a", "a2").startswith("forked qr/a@")
    assert repo.head("qr/a2") == head and st.branches["qr/a2"].best_us == 100.0
    assert st.branches["qr/a2"].parent_branch == "qr/a"
    # an attempt: iteration 1 rejected at 120 µs
    c = repo.commit("CONFIG = {'a': 2}\n", "attempt\n", head)
    repo.mark_attempt(1, c)
    beam.emit(ev.IterationStarted(iteration=1, branch="qr/a", parent_sha=head))
    beam.emit(ev.AttemptCommitted(iteration=1, branch="qr/a", sha=c, parent_sha=head, verdict="rejected",
                                  geomean_us=120.0))
    beam.fork("a@1", "from-attempt")
    assert repo.head("qr/from-attempt") == c and st.branches["qr/from-attempt"].best_us == 120.0
    beam.fork(f"a@{c[:8]}", "qr/by-sha")
    assert repo.head("qr/by-sha") == c
    with pytest.raises(BeamError, match="already exists"):
        beam.fork("a", "a2")
    with pytest.raises(BeamError, match="neither an attempt"):
        beam.fork("a@zzz", "x")
    with pytest.raises(BeamError, match="branch name"):
        beam.fork("a", "bad name!")


def test_new_forked_and_resumed_branches_run_first():
    st = make_state("a", "b")
    attempt(st, "qr/a", "accepted", 50.0)
    attempt(st, "qr/b", "rejected", 101.0)
    attempt(st, "qr/a", "accepted", 25.0)                       # a is on a roll
    assert pick_branch(st) == "qr/a"
    st.apply(ev.BranchStateChanged(branch="qr/b", state="paused"))
    st.apply(ev.BranchStateChanged(branch="qr/b", state="active", reason="resumed"))
    assert pick_branch(st) == "qr/b"
    attempt(st, "qr/b", "rejected", 101.0)
    st.apply(ev.BranchCreated(branch="qr/c", family="a", sha="c0", geomean_us=25.0, seq=50))
    assert pick_branch(st) == "qr/c"
