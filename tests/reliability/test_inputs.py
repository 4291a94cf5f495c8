"""Bad inputs: broken tasks, a session from a newer Steer, damaged event logs, a vanished session, wild steering.

Every one ends in a clear one-line error or a recorded recovery, never a traceback. A malformed
task.yml, a reference.py without check_implementation and a binary candidate are proven in
tests/test_cli_eval.py and tests/test_harness.py (marked `reliability` there). The console's side of
a deleted session belongs to tests/test_console_*; here: the agent's reader, `steer status`, `steer ls`.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent import events as ev
from agent.harness.runner import EvalOptions, evaluate
from agent.loop import prepare_session
from agent.session import (MAX_LINE_BYTES, MAX_STEERING_CHARS, EventLog, EventReader, append_inbox, create_session,
                           lock_holder)
from fixtures.agent_helpers import check_record, config, events, of_type, steer, tiny_task
from reliability.harness_helpers import GEQRF
from test_steering import Rig

pytestmark = pytest.mark.reliability


def one_line_error(p) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steer: ") and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def test_a_reference_that_fails_to_import_is_the_tasks_fault(small_qr_task, candidate, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(small_qr_task.path, broken)
    with open(broken / "reference.py", "a") as f:
        f.write("\nraise ImportError('the task is broken')\n")
    from agent.harness.task import load_task
    r = evaluate(candidate(GEQRF), load_task(broken), EvalOptions(device="cpu", stage_timeout=8.0))
    assert r.error_class == "harness" and "reference.py failed to import" in r.message, r.message


def test_run_with_a_malformed_task_is_one_line(tmp_path: Path):
    task = tiny_task(tmp_path)
    (task / "task.yml").write_text("tests: [\n  {size: 1\n")
    assert "not valid YAML" in one_line_error(steer("run", "bad", "--headless", "--task", str(task),
                                                    "--device", "cpu", root=tmp_path / "sessions"))


def test_a_session_from_a_newer_steer_is_refused_in_one_line(tmp_path: Path):
    root = tmp_path / "sessions"
    s = create_session(root, "future", {"task": "qr"})
    s.toml.write_text(s.toml.read_text().replace("format_version = 1", "format_version = 99"))
    for args in (("run", "future", "--headless"), ("status", "future"), ("say", "future", "hello there")):
        assert "newer Steer (format 99)" in one_line_error(steer(*args, root=root)), args
    ls = steer("ls", root=root)
    assert ls.returncode == 0 and "future" in ls.stdout


def test_a_damaged_event_log_is_read_around_and_recorded_on_resume(tmp_path: Path):
    """A garbage line, a 50 MB line and a torn tail after a real run: readers skip them, the resume says so."""
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy",))
    s = prepare_session(root, "dmg", config(task, max_iterations=1))
    assert steer("run", "dmg", "--headless", root=root, timeout=180).returncode == 0
    intact = s.events_path.read_bytes()
    with open(s.events_path, "ab") as f:
        f.write(b"this is not json\n")
        f.write(b'{"seq": 0, "type": "error", "message": "' + b"x" * (50 * 1024 * 1024) + b'"}\n')
        f.write(b'{"seq": 99, "ts": 1.0, "type": "iteration_sta')
    reader = EventReader(s.events_path)
    assert [e.seq for e in reader.read_new()] == [e.seq for e in EventReader(s.events_path).iter_all()]
    assert reader.skipped == 2
    for args in (("status", "dmg"), ("ls",)):
        out = steer(*args, root=root)
        assert out.returncode == 0 and "dmg" in out.stdout, out.stderr
    r = steer("run", "dmg", "--headless", "--max-iterations", "2", root=root, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    data = s.events_path.read_bytes()
    assert data.startswith(intact) and b"x" * 1000 in data          # nothing cut but the torn tail
    items = events(s)
    details = {e.action: e.detail for e in of_type(items, ev.Recovery)}
    assert "torn events line cut" in details and details["unreadable event lines skipped"].startswith("2 lines")
    st = check_record(s)
    assert [a.iteration for a in st.attempts] == [1, 2]


def test_a_session_deleted_under_an_attached_reader(tmp_path: Path):
    root = tmp_path / "sessions"
    s = create_session(root, "doomed", {"task": "qr"})
    log = EventLog(s.events_path)
    log.append(ev.ErrorEvent(where="a", message="one"))
    reader = EventReader(s.events_path)
    assert len(reader.read_new()) == 1
    create_session(root, "other", {"task": "qr"})
    shutil.rmtree(s.dir)
    log.append(ev.ErrorEvent(where="a", message="into the void"))   # the writer's fd outlives the directory
    log.close()
    assert reader.read_new() == [] and reader.read_new() == []
    assert lock_holder(s.lock_path) is None
    assert "no session 'doomed'" in one_line_error(steer("status", "doomed", root=root))
    ls = steer("ls", root=root)
    assert ls.returncode == 0 and "other" in ls.stdout and "doomed" not in ls.stdout
    status = steer("status", root=root)                             # the latest session is the one left
    assert status.returncode == 0 and "session other" in status.stdout


def test_steering_with_control_characters_or_a_megabyte_is_cleaned_and_capped(tmp_path: Path):
    root = tmp_path / "sessions"
    s = create_session(root, "st", {"task": "qr"})
    r = steer("say", "st", "make it \x1b[2J\x1b[31mfaster\x07\rnow", root=root)
    assert r.returncode == 0, r.stderr
    big = append_inbox(s, "y" * (1024 * 1024))
    assert big["truncated"] and len(big["text"]) == MAX_STEERING_CHARS
    lines = [json.loads(x) for x in s.inbox_path.read_text().splitlines()]
    assert lines[0]["text"] == "make it [2J[31mfasternow"
    assert all(not any(ord(c) < 32 and c not in "\n\t" for c in rec["text"]) for rec in lines)


def test_inbox_lines_from_any_writer_are_cleaned_and_a_huge_one_does_not_block_the_rest(tmp_path: Path):
    """The console and `steer say` clean what they write; the agent cleans what it reads, whoever wrote it."""
    rig = Rig(tmp_path)
    try:
        with open(rig.session.inbox_path, "ab") as f:
            f.write(json.dumps({"id": "raw1", "text": "\x1b]0;pwned\x07go " + "z" * (1024 * 1024)}).encode() + b"\n")
            f.write(json.dumps({"id": "raw2", "text": "q" * (MAX_LINE_BYTES + 10)}).encode() + b"\n")
            f.write(json.dumps({"id": "raw3\x1b[1m", "text": "/pause sleepy"}).encode() + b"\n")
        rig.steering.drain()
        items = events(rig.session)
        received = {e.id: e for e in of_type(items, ev.SteeringReceived)}
        assert set(received) == {"raw1", "raw3[1m"}
        assert len(received["raw1"].text) == MAX_STEERING_CHARS and "\x1b" not in received["raw1"].text
        assert rig.outcome("raw3[1m").detail and rig.state.branches["qr/sleepy"].state == "paused"
        skipped = [e for e in of_type(items, ev.ErrorEvent) if e.where == "steering"]
        assert len(skipped) == 1 and "skipped" in skipped[0].message
        assert rig.steering.drain() == 0 and len(of_type(events(rig.session), ev.ErrorEvent)) == 1
    finally:
        rig.log.close()
        rig.repo.close()
