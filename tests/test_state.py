"""SessionState is the fold of the events: branches, attempts, steering, resume."""
from __future__ import annotations

from agent import events as ev
from agent.state import fold


def story() -> list[ev.Event]:
    items = [
        ev.SessionStarted(name="s", task="qr", task_path="/t", proposer="tune", device="cpu"),
        ev.BaselineMeasured(geomean_us=200.0),
        ev.BranchCreated(branch="qr/a", family="a", sha="a0", geomean_us=100.0, geomean_se_us=1.0),
        ev.BranchCreated(branch="qr/b", family="b", sha="b0", geomean_us=None),
        ev.SteeringReceived(id="s1", text="try bigger tiles", target="qr/a", inbox_offset=80),
        ev.SteeringReceived(id="s2", text="be careful", scope="standing", inbox_offset=150),
        ev.IterationStarted(iteration=1, branch="qr/a", parent_sha="a0"),
        ev.ProposalMade(iteration=1, branch="qr/a", proposer="llm", ok=True, summary="tiles", tokens_in=10,
                        tokens_out=5, cost_usd=0.01, steering_ids=["s1", "s2"]),
        ev.SteeringApplied(id="s1", iteration=1, branch="qr/a"),
        ev.SteeringApplied(id="s2", iteration=1, branch="qr/a"),
        ev.EvalFinished(iteration=1, branch="qr/a", ok=True, error_class=None, message="", geomean_us=80.0, speedup=2.5),
        ev.AttemptCommitted(iteration=1, branch="qr/a", sha="a1", parent_sha="a0", verdict="accepted",
                            geomean_us=80.0, geomean_se_us=0.5),
        ev.IterationStarted(iteration=2, branch="qr/b", parent_sha="b0"),
        ev.ProposalMade(iteration=2, branch="qr/b", proposer="llm", ok=False, error="unusable reply"),
        ev.AttemptCommitted(iteration=2, branch="qr/b", sha="b2", parent_sha="b0", verdict="failed"),
        ev.IterationStarted(iteration=3, branch="qr/a", parent_sha="a1"),
    ]
    for n, e in enumerate(items, 1):
        e.seq, e.ts = n, 1000.0 + n
    return items


def test_fold_builds_branches_attempts_and_totals():
    st = fold(story())
    a, b = st.branches["qr/a"], st.branches["qr/b"]
    assert (a.head_sha, a.best_us, a.best_se_us, a.accepted, a.attempts) == ("a1", 80.0, 0.5, 1, 1)
    assert a.iterations == [1, 3] and a.history == [(0, 100.0), (1, 80.0)]
    assert (b.head_sha, b.best_us, b.since_gain, b.proposal_fail_streak) == ("b0", None, 1, 1)
    assert st.best_us == 80.0 and st.best_speedup == 2.5
    assert st.iteration == 3 and st.attempt(3).verdict == "running"
    assert st.attempt(2).proposal_ok is False and st.attempt(2).message == "unusable reply"
    assert st.tokens == 15 and abs(st.cost_usd - 0.01) < 1e-9
    assert st.running and st.inbox_offset == 150


def test_steering_statuses_and_pending():
    st = fold(story())
    assert st.steering["s1"].status == "used" and st.steering["s1"].used_in == [1]
    assert [s.id for s in st.pending_steering()] == ["s2"]      # standing stays pending


def test_resume_marks_the_interrupted_iteration_failed_until_reconciled():
    items = story() + [ev.SessionResumed(pid=1, next_iteration=4, seq=99, ts=2000.0)]
    st = fold(items)
    assert st.attempt(3).verdict == "failed" and "interrupted" in st.attempt(3).message


def test_branch_state_and_focus():
    items = story() + [ev.BranchStateChanged(branch="qr/b", state="paused", reason="by steering"),
                       ev.FocusChanged(branch="qr/a"),
                       ev.BranchStateChanged(branch="qr/a", state="killed"),
                       ev.AgentStopped(reason="budget", iterations=3)]
    st = fold(items)
    assert st.branches["qr/b"].state == "paused" and st.branches["qr/b"].state_reason == "by steering"
    assert st.focus is None                          # killing the focused branch unfocuses
    assert [b.name for b in st.live_branches()] == ["qr/b"]
    assert not st.running and st.stop_reason == "budget"


def test_round_trip_through_json():
    for e in story():
        again = ev.parse_line(__import__("json").dumps(e.to_json()))
        assert again == e


def test_the_noise_floor_is_measured_or_set_and_a_resume_can_change_it():
    measured = ev.NoiseMeasured(floor=0.2, samples=[{"branch": "qr/a", "first_us": 100.0, "again_us": 80.0,
                                                      "gap": 0.2}])
    assert fold(story()).floor is None
    st = fold(story() + [measured])
    assert st.floor == (0.2, "measured") and st.noise_samples[0]["branch"] == "qr/a"
    started = ev.SessionStarted(name="s", task="qr", task_path="/t", proposer="tune", config={"noise_floor": 0.03})
    assert fold([started, measured]).floor == (0.03, "set")
    resumed = ev.SessionResumed(pid=1, next_iteration=4, config={"noise_floor": 0.05})
    assert fold(story() + [measured, resumed]).floor == (0.05, "set")
    # a resume that does not give it keeps what was set; a malformed stored value is ignored
    assert fold([started, measured, ev.SessionResumed(pid=1, next_iteration=1)]).floor == (0.03, "set")
    bad = ev.SessionStarted(name="s", task="qr", task_path="/t", proposer="tune", config={"noise_floor": "high"})
    assert fold([bad, measured]).floor == (0.2, "measured")


def test_each_family_has_its_own_measured_floor_forks_included():
    fork = ev.BranchCreated(branch="qr/a-2", family="a", sha="a1", source="fork of qr/a@a1", parent_branch="qr/a")
    measured = ev.NoiseMeasured(floor=0.2, samples=[
        {"branch": "qr/a", "first_us": 100.0, "again_us": 80.0, "gap": 0.2},
        {"branch": "qr/b", "first_us": 100.0, "again_us": 99.9, "gap": 0.001},
        {"branch": "qr/gone", "first_us": 100.0, "again_us": 50.0, "gap": 0.5}])   # no such branch: ignored
    st = fold(story() + [fork, measured])
    # qr/b's pair was 0.1% apart: its family's floor is the fixed 1%, not a's 20%
    assert st.family_floors() == {"a": 0.2, "b": 0.01}
    assert st.floor == (0.2, "measured")
