"""The console's non-UI parts: the model fold, steering states, digest, alerts, tail, attempt data."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from agent import events as ev
from agent.session import EventReader, append_inbox, create_session
from console.attempt_data import git_diff, load_detail, scan_events
from console.demo import append_live, demo_config, demo_events, git_two_commits, write_demo
from console.digest import Digest, SeenStore
from console.model import ConsoleModel
from console.tail import SessionTail, TailCallbacks


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def folded(attempts: int = 40, since: int | None = None) -> ConsoleModel:
    model = ConsoleModel(since)
    events = demo_events(attempts)
    for k, e in enumerate(events, 1):
        e.seq = k
    model.apply(events)
    return model


def test_model_folds_the_demo_run() -> None:
    m = folded(40)
    s = m.state
    assert s.iteration == 40 and len(s.attempts) == 40
    assert set(m.series) == set(s.branches)
    # every committed attempt lands in exactly one chart list
    assert sum(len(b.it) + len(b.fail_it) for b in m.series.values()) == 40
    # the best-so-far line only goes down
    for b in m.series.values():
        us = [g.us for g in b.gains]
        assert us == sorted(us, reverse=True)
    assert [mk.iteration for mk in m.marks] == [13, 20]
    assert m.activity and m.activity[-1].text.startswith("agent stopped")


def test_the_noise_floor_shows_in_the_activity_log_and_the_status() -> None:
    from agent.summary import status_text

    m = folded(3)
    line = next(a for a in m.activity if "noise floor" in a.text)
    assert line.text.startswith("noise floor 1.6% at most: each family's gains must clear its own (") and \
        line.level == "info"
    assert all(f"{name} 1.6%" in line.text for name in m.state.branches), line.text
    big = ev.NoiseMeasured(floor=0.31, samples=[{"branch": "qr/cholqr", "first_us": 100.0, "again_us": 145.0,
                                                 "gap": 0.31}], seq=999, ts=m.state.last_ts)
    m.apply([big])
    assert m.activity[-1].level == "warn" and "100.00 µs and 145.00 µs on qr/cholqr" in m.activity[-1].text
    assert m.state.floor == (0.31, "measured")

    class _Session:
        name = "demo"

        @staticmethod
        def holder() -> None:
            return None
    text = status_text(_Session(), m.state)
    assert "noise floor 31.0% (measured)" in text
    # each family's own floor: cholqr's from the newer pair, the others' from the demo's
    assert "noise floor by family: " in text and "cholqr 31.0%" in text, text


def test_unknown_event_types_are_ignored() -> None:
    m = ConsoleModel()
    before = dict(m.versions)
    m.apply([ev.UnknownEvent(raw={"type": "martian"}, seq=1, ts=1.0)])
    assert m.versions == before and not m.activity


def test_attempt_rows_newest_first_and_filtered() -> None:
    m = folded(40)
    rows, total = m.attempt_rows(limit=5)
    assert [a.iteration for a in rows] == [40, 39, 38, 37, 36] and total == 40
    rows, total = m.attempt_rows("qr/cholqr", limit=1000)
    assert rows and all(a.branch == "qr/cholqr" for a in rows)
    assert total == len(rows) == sum(1 for a in m.state.attempts if a.branch == "qr/cholqr")


def test_steering_states_queued_seen_used_rejected(tmp_path: Path) -> None:
    session = create_session(tmp_path, "s", demo_config())
    rec = append_inbox(session, "try bigger panels", target="qr/cholqr", scope="standing")
    m = ConsoleModel()
    m.add_inbox([rec])
    assert m.steering_rows()[0].detail == "queued"
    m.apply([ev.SteeringReceived(id=rec["id"], text=rec["text"], target="qr/cholqr", scope="standing", seq=1)])
    assert m.steering_rows()[0].detail == "seen"
    m.apply([ev.SteeringApplied(id=rec["id"], iteration=7, seq=2)])
    assert m.steering_rows()[0].detail == "used in #7"
    m.apply([ev.SteeringApplied(id=rec["id"], iteration=9, seq=3)])
    assert m.steering_rows()[0].detail == "used 2× (last #9)"
    bad = append_inbox(session, "/pause nope")
    m.add_inbox([bad])
    m.apply([ev.SteeringReceived(id=bad["id"], text=bad["text"], kind="command", seq=4),
             ev.SteeringRejected(id=bad["id"], reason="unknown branch nope", seq=5)])
    assert {r.id: r.detail for r in m.steering_rows()}[bad["id"]] == "rejected: unknown branch nope"
    assert m.prompt_history() == ["try bigger panels", "/pause nope"]


def test_digest_lists_what_happened_after_the_last_look() -> None:
    m = folded(40, since=30)          # the user last saw seq 30: early in the run
    d = m.digest
    assert d is not None and not d.empty
    text = "\n".join(d.lines())
    assert d.attempts > 30 and d.new_bests and d.plateaus and d.errors
    assert "used in #13" in text and "rejected" in text and "agent stopped (budget)" in text
    assert "new best" in text
    nothing = folded(40, since=10**9).digest
    assert nothing is not None and nothing.empty


def test_alerts_only_for_live_events() -> None:
    m = ConsoleModel()
    events = demo_events(40)
    for k, e in enumerate(events, 1):
        e.seq = k
    assert m.apply(events[:200]) == []        # the backlog never rings
    m.live = True
    alerts = m.apply(events[200:])
    assert {a.title for a in alerts} >= {"New best"}
    m.apply([ev.PlateauDetected(branch="qr/cholqr", attempts_since_gain=9, minutes_since_gain=30, seq=10**6)])
    assert m.apply([ev.PlateauDetected(branch="qr/cholqr", attempts_since_gain=9, minutes_since_gain=30,
                                       seq=10**6 + 1)])[0].title == "Plateau"
    assert m.apply([ev.NoiseMeasured(floor=0.03, seq=10**6 + 2)]) == []          # a floor like a GPU's: quiet
    (high,) = m.apply([ev.NoiseMeasured(floor=0.434, seq=10**6 + 3)])
    assert high.title == "High noise floor" and "differed by 43.4%" in high.message and high.severity == "warning"


def test_seen_store_round_trip(tmp_path: Path) -> None:
    store = SeenStore(tmp_path / "state" / "seen.json")
    d = tmp_path / "sess"
    d.mkdir()
    assert store.last_seen(d) is None
    store.save(d, 42)
    assert store.last_seen(d) == 42
    store.save(d, 7)                  # never goes backwards
    assert store.last_seen(d) == 42
    assert (tmp_path / "state" / "seen.json").stat().st_mode & 0o077 == 0


def test_digest_empty_for_nothing() -> None:
    assert Digest(since_seq=5).empty


def test_tail_reads_incrementally_and_reports_gone(tmp_path: Path) -> None:
    session = write_demo(tmp_path, "t", attempts=5)
    got: dict[str, list] = {"events": [], "inbox": [], "gone": [], "loaded": []}
    cb = TailCallbacks(loaded=lambda m, s: got["loaded"].append(m), events=got["events"].extend,
                       inbox=got["inbox"].extend, holder=lambda pid: None, gone=got["gone"].append)
    tail = SessionTail(session, poll=0.05).preload()
    stop = threading.Event()
    thread = threading.Thread(target=tail.run, args=(stop, cb), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not got["loaded"] and time.monotonic() < deadline:
        time.sleep(0.02)
    model = got["loaded"][0]
    offset = tail.reader.offset
    assert model.state.iteration == 5 and offset == session.events_path.stat().st_size
    append_live(session, [ev.IterationStarted(iteration=6, branch="qr/cholqr", parent_sha="abc")])
    with open(session.events_path, "a") as f:           # a newer Steer's event type, and garbage
        f.write(json.dumps({"seq": 10**6, "ts": 1.0, "type": "martian", "x": 1}) + "\nnot json\n")
    append_inbox(session, "hello")
    while (len(got["events"]) < 2 or not got["inbox"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [e.type for e in got["events"]] == ["iteration_started", "unknown"]
    assert got["inbox"][0]["text"] == "hello"
    assert tail.reader.offset == session.events_path.stat().st_size   # only the new bytes were read
    for p in sorted(session.dir.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    session.dir.rmdir()
    while not got["gone"] and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    thread.join(5)
    assert "deleted" in got["gone"][0] and not thread.is_alive()


def test_attempt_detail_from_git_and_artifacts(tmp_path: Path) -> None:
    session = write_demo(tmp_path, "g", attempts=3, results=True)
    parent, child = git_two_commits(session.repo)
    diff, note = git_diff(session.repo, parent, child)
    assert "-CONFIG = {'panel': 32, 'num_warps': 4}" in diff and "+CONFIG = {'panel': 64" in diff and not note
    assert git_diff(session.repo, parent, "0" * 40)[1].startswith("git:")
    assert "no commit" in git_diff(session.repo, parent, "")[1]
    assert "no git repository" in git_diff(tmp_path / "nowhere", parent, child)[1]
    state = folded(3).state
    a = state.attempt(2)
    assert a is not None
    d = load_detail(session, a)         # no artifacts: the result comes from the events
    assert len(d.cases) == 22 and "transcript" in d.transcript_note
    assert scan_events(session, 2)["eval_finished"].iteration == 2
    art = session.artifact_dir(2)
    (art / "transcript.txt").write_text("PROMPT\n...\nREPLY\n")
    (art / "eval.json").write_text(json.dumps({"ok": False, "stderr_tail": "Traceback: boom", "cases": []}))
    d = load_detail(session, a)
    assert d.transcript.startswith("PROMPT") and d.stderr == "Traceback: boom"


def _slow_fold(path: Path, since: int | None = None) -> ConsoleModel:
    m = ConsoleModel(since)
    reader = EventReader(path)
    while batch := reader.read_new(limit=1000):
        m.apply(batch)
    return m


@pytest.mark.parametrize("tail", ["", "progress", "torn", "garbage"])
def test_fast_backlog_fold_equals_the_plain_fold(tmp_path: Path, tail: str) -> None:
    from dataclasses import asdict

    from console.backlog import load_backlog
    session = write_demo(tmp_path, "b", attempts=30, results=True, stopped=False)
    with open(session.events_path, "a") as f:
        f.write(json.dumps({"seq": 10**5, "ts": 2e9, "type": "martian"}) + "\n")
        if tail == "progress":     # the file ends while an evaluation runs
            f.write(json.dumps(ev.EvalProgress(iteration=31, branch="qr/cholqr", stage="bench", detail="3/12",
                                               seq=10**5 + 1, ts=2e9 + 1).to_json()) + "\n")
        if tail == "garbage":
            f.write("{not json\n")
        if tail == "torn":
            f.write('{"seq": 100001, "ts": 2000000001.0, "type": "err')
    fast = ConsoleModel(since_seq=50)
    offset = load_backlog(session.events_path, fast)
    slow = _slow_fold(session.events_path, since=50)
    a, b = fast.state, slow.state
    assert (a.iteration, a.best_us, a.last_seq, a.last_ts, a.activity, a.evaluations, a.tokens) == \
           (b.iteration, b.best_us, b.last_seq, b.last_ts, b.activity, b.evaluations, b.tokens)
    assert [asdict(x) for x in a.attempts] == [asdict(x) for x in b.attempts]
    assert [x.text for x in fast.activity] == [x.text for x in slow.activity]
    assert fast.digest is not None and slow.digest is not None and fast.digest.lines() == slow.digest.lines()
    assert {k: (v.gains, v.it, v.fail_it) for k, v in fast.series.items()} == \
           {k: (v.gains, v.it, v.fail_it) for k, v in slow.series.items()}
    size = session.events_path.stat().st_size
    assert offset == (size - len('{"seq": 100001, "ts": 2000000001.0, "type": "err') if tail == "torn" else size)
