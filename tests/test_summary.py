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
