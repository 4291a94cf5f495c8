"""The session store: layout and permissions, the agent lock, the fsynced event log, torn lines, the inbox."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import events as ev
from agent.session import (AgentLock, EventLog, EventReader, SessionError, append_inbox, create_session,
                           default_root, list_sessions, open_session, read_inbox, write_config)


def test_layout_and_permissions(tmp_path: Path):
    s = create_session(tmp_path / "sessions", "s1", {"task": "qr", "prices": {"input_per_mtok": 1.5}})
    assert stat.S_IMODE(s.dir.stat().st_mode) == 0o700
    for f in (s.toml, s.events_path, s.inbox_path):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert s.config()["prices"]["input_per_mtok"] == 1.5
    write_config(s, {"task": "qr", "beam": 3})
    assert s.config()["beam"] == 3 and stat.S_IMODE(s.toml.stat().st_mode) == 0o600
    assert [x.name for x in list_sessions(tmp_path / "sessions")] == ["s1"]
    with pytest.raises(SessionError, match="already exists"):
        create_session(tmp_path / "sessions", "s1", {})
    with pytest.raises(SessionError, match="no session 'nope'.*s1"):
        open_session(tmp_path / "sessions", "nope")
    with pytest.raises(SessionError, match="session name"):
        create_session(tmp_path / "sessions", "../evil", {})


def test_default_root_follows_steer_home(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("STEER_HOME", str(tmp_path / "elsewhere"))
    assert default_root() == tmp_path / "elsewhere"
    monkeypatch.delenv("STEER_HOME")
    assert default_root() == Path("sessions")


def test_events_are_numbered_and_read_incrementally(tmp_path: Path):
    s = create_session(tmp_path, "s", {})
    log = EventLog(s.events_path)
    log.append(ev.ErrorEvent(where="a", message="one"))
    reader = EventReader(s.events_path)
    assert [e.seq for e in reader.read_new()] == [1]
    log.append(ev.Recovery(action="x"))
    log.append(ev.IterationStarted(iteration=1, branch="qr/a", parent_sha="p"))
    new = reader.read_new()
    assert [e.type for e in new] == ["recovery", "iteration_started"] and new[1].iteration == 1
    assert reader.read_new() == []
    log.close()
    again = EventLog(s.events_path)           # a new agent continues the numbering
    assert again.append(ev.Recovery(action="y")).seq == 4
    again.close()


@pytest.mark.reliability
def test_a_torn_last_line_is_skipped_on_read_and_cut_on_resume(tmp_path: Path):
    s = create_session(tmp_path, "s", {})
    log = EventLog(s.events_path)
    log.append(ev.ErrorEvent(where="a", message="kept"))
    log.close()
    with open(s.events_path, "ab") as f:
        f.write(b'{"seq": 2, "ts": 1.0, "type": "recov')
    assert [e.seq for e in EventReader(s.events_path).iter_all()] == [1]
    log = EventLog(s.events_path)
    assert log.repaired_bytes == len(b'{"seq": 2, "ts": 1.0, "type": "recov')
    assert log.append(ev.Recovery(action="cut")).seq == 2
    log.close()
    assert [e.type for e in EventReader(s.events_path).iter_all()] == ["error", "recovery"]


def test_unknown_event_types_are_kept(tmp_path: Path):
    s = create_session(tmp_path, "s", {})
    s.events_path.write_bytes(b'{"seq": 1, "ts": 1.0, "type": "from_the_future", "x": 1}\nnot json\n')
    got = list(EventReader(s.events_path).iter_all())
    assert isinstance(got[0], ev.UnknownEvent) and got[0].raw["x"] == 1 and len(got) == 1


def test_inbox_records_and_offsets(tmp_path: Path):
    s = create_session(tmp_path, "s", {})
    a = append_inbox(s, "make it faster", target="qr/a", scope="standing")
    b = append_inbox(s, "/pause qr/b\x07")
    records, end = read_inbox(s)
    assert [r["id"] for r, _ in records] == [a["id"], b["id"]]
    assert records[1][0]["text"] == "/pause qr/b"          # control characters dropped
    assert records[0][0]["scope"] == "standing" and records[0][0]["target"] == "qr/a"
    rest, _ = read_inbox(s, records[0][1])
    assert [r["id"] for r, _ in rest] == [b["id"]]
    assert read_inbox(s, end)[0] == []
    with pytest.raises(SessionError):
        append_inbox(s, "   ")
    with pytest.raises(SessionError):
        append_inbox(s, "x", scope="forever")


HOLD = """
import sys, time
from pathlib import Path
from agent.session import AgentLock
AgentLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.reliability
def test_one_agent_per_session_and_a_dead_holder_is_taken_over(tmp_path: Path):
    s = create_session(tmp_path, "s", {})
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(s.lock_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert s.holder() == proc.pid
        with pytest.raises(SessionError, match=f"pid {proc.pid}"):
            AgentLock(s.lock_path).acquire()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        lock = AgentLock(s.lock_path).acquire(wait=5)
        assert lock.took_over_from == proc.pid and s.holder() == os.getpid()
        lock.release()
        assert s.holder() is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_acquire_waits_for_a_predecessor(tmp_path: Path):
    s = create_session(tmp_path, "s", {})
    proc = subprocess.Popen([sys.executable, "-c", HOLD.replace("time.sleep(60)", "time.sleep(1)"), str(s.lock_path)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    lock = AgentLock(s.lock_path).acquire(wait=20)
    assert time.monotonic() - t0 < 15
    lock.release()
    proc.wait()


def test_event_log_finds_the_last_seq_from_the_end_of_a_long_file(tmp_path):
    """Opening the log reads its tail for the last seq; a garbage tail falls back to older lines."""
    from agent import events as ev
    from agent.session import TAIL_SCAN_BYTES, EventLog
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for i in range(3000):
        log.append(ev.ErrorEvent(where="test", message="x" * 400))
    log.close()
    assert path.stat().st_size > TAIL_SCAN_BYTES
    with open(path, "ab") as f:
        f.write(b"not json at all\n{\"no\": \"type\"}\n")
    reopened = EventLog(path)
    assert reopened.next_seq == 3001
    reopened.append(ev.ErrorEvent(where="test", message="after"))
    reopened.close()
    assert EventLog(path).next_seq == 3002
