"""The one-line summaries of events (agent/summary.py) that the headless log prints."""
from __future__ import annotations

from agent import events as ev
from agent.state import fold
from agent.summary import format_event


def test_a_verdict_line_gives_the_reason_of_a_win_too():
    created = ev.BranchCreated(branch="qr/a", family="a", sha="a0", geomean_us=3385.11)
    won = ev.AttemptCommitted(iteration=4, branch="qr/a", sha="a4", parent_sha="a0", verdict="accepted",
                              geomean_us=3260.36, summary="lookahead_elems 33554432->8388608",
                              reason="2.1% faster than the head's 3330.00 µs (noise threshold 33.30 µs); the head "
                                     "re-timed at 3330.00 µs (recorded 3385.11 µs); the candidate re-timed at "
                                     "3260.36 µs on the head's inputs (first 3255.00 µs)")
    state = fold([created, won])
    line = format_event(won, state)
    assert line is not None and line.startswith("#4 qr/a accepted 3260.36 µs")
    # the re-timings that make the win believable are all there, to the last one
    assert line.endswith(" - " + won.reason), line
    runaway = ev.AttemptCommitted(iteration=5, branch="qr/a", sha="a5", parent_sha="a4", verdict="rejected",
                                  geomean_us=1.0, reason="x" * 5000)
    assert len(format_event(runaway, state) or "") == 480


def test_going_back_to_the_measured_floors_names_each_familys():
    from agent.summary import floor_set_line

    items = [ev.BranchCreated(branch="qr/a", family="a", sha="a0"), ev.BranchCreated(branch="qr/b", family="b", sha="b0"),
             ev.NoiseMeasured(floor=0.03, samples=[{"branch": "qr/a", "first_us": 97.0, "again_us": 100.0, "gap": 0.03},
                                                   {"branch": "qr/b", "first_us": 99.9, "again_us": 100.0, "gap": 0.001}]),
             ev.NoiseFloorSet(floor=0.02), ev.NoiseFloorSet(floor=None, steering_id="s1")]
    state = fold(items)
    assert floor_set_line(items[-1], state) == "noise floor back to the measured one (3.0%; by family: a 3.0%, b 1.0%) by s1"
    assert floor_set_line(items[-2], fold(items[:-1])) == "noise floor set to 2.0%"
