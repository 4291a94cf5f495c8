"""The session directory: create/open, the agent lock, the event log (append + incremental read), the inbox.

The directory is the only channel between the agent and any console: the agent appends to
events.jsonl, consoles and `steer say` append to inbox.jsonl. Files are 0600, the dir 0700.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import socket
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from agent import faults
from agent.events import Event, parse_line

FORMAT_VERSION = 1
TAIL_SCAN_BYTES = 1 << 20           # how much of events.jsonl's end is read to find the last seq
MAX_LINE_BYTES = 4 * 1024 * 1024       # a longer line is skipped, not parsed
MAX_STEERING_CHARS = 4000
MAX_FIELD_CHARS = 64 * 1024            # an event line that would pass MAX_LINE_BYTES has its long strings cut
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class SessionError(Exception):
    """A session that cannot be used as asked; the message says why."""


def default_root() -> Path:
    return Path(os.environ.get("STEER_HOME") or "sessions").expanduser()


def _private_file(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


# -- session.toml ----------------------------------------------------------------------------
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a valid TOML basic string


def dump_toml(config: dict[str, Any]) -> str:
    """A small TOML writer: scalars and lists at the top, one level of tables; None is left out."""
    lines, tables = [], []
    for k, v in config.items():
        if v is None:
            continue
        (tables if isinstance(v, dict) else lines).append((k, v))
    out = [f"{k} = {_toml_value(v)}" for k, v in lines]
    for name, table in tables:
        out.append(f"\n[{name}]")
        out.extend(f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None and not isinstance(v, dict))
    return "\n".join(out) + "\n"


@dataclass
class Session:
    root: Path
    name: str

    @property
    def dir(self) -> Path:
        return self.root / self.name

    @property
    def toml(self) -> Path:
        return self.dir / "session.toml"

    @property
    def events_path(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def inbox_path(self) -> Path:
        return self.dir / "inbox.jsonl"

    @property
    def repo(self) -> Path:
        return self.dir / "repo"

    @property
    def artifacts(self) -> Path:
        return self.dir / "artifacts"

    @property
    def lock_path(self) -> Path:
        return self.dir / "agent.lock"

    @property
    def log_path(self) -> Path:
        return self.dir / "agent.log"

    def exists(self) -> bool:
        return self.toml.is_file()

    def config(self) -> dict[str, Any]:
        try:
            cfg = tomllib.loads(self.toml.read_text())
        except FileNotFoundError:
            raise SessionError(f"no session {self.name!r} under {self.root}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SessionError(f"{self.toml}: unreadable ({exc})") from None
        version = int(cfg.get("format_version", 1))
        if version > FORMAT_VERSION:
            raise SessionError(f"session {self.name!r} was written by a newer Steer (format {version}); "
                               f"this one reads format {FORMAT_VERSION}: upgrade steer-console")
        return cfg

    def artifact_dir(self, iteration: int) -> Path:
        # No `parents`: a session deleted under a running agent must stay deleted, not reappear in part.
        self.artifacts.mkdir(mode=0o700, exist_ok=True)
        d = self.artifacts / str(iteration)
        d.mkdir(mode=0o700, exist_ok=True)
        return d

    def holder(self) -> int | None:
        """Pid of the live agent holding agent.lock, or None when nobody holds it."""
        return lock_holder(self.lock_path)


def create_session(root: Path, name: str, config: dict[str, Any]) -> Session:
    if not NAME_RE.match(name):
        raise SessionError(f"session name {name!r}: use letters, digits, '.', '_' and '-' (at most 64)")
    root.mkdir(parents=True, exist_ok=True)
    s = Session(root=root, name=name)
    if s.exists():
        raise SessionError(f"session {name!r} already exists under {root}")
    s.dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(s.dir, 0o700)
    s.artifacts.mkdir(mode=0o700, exist_ok=True)
    for path in (s.events_path, s.inbox_path):
        _private_file(path)
    tmp = s.dir / "session.toml.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(dump_toml({"format_version": FORMAT_VERSION, **config}))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, s.toml)
    _fsync_dir(s.dir)
    return s


def write_config(session: Session, config: dict[str, Any]) -> None:
    """Replace session.toml atomically (a resume with new options, a /budget change)."""
    tmp = session.dir / "session.toml.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(dump_toml({"format_version": FORMAT_VERSION, **config}))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, session.toml)
    _fsync_dir(session.dir)


def open_session(root: Path, name: str) -> Session:
    s = Session(root=root, name=name)
    if not s.exists():
        known = list_sessions(root)
        hint = f" (sessions: {', '.join(x.name for x in known[:8])})" if known else ""
        raise SessionError(f"no session {name!r} under {root}{hint}")
    s.config()  # refuses a newer format
    return s


def list_sessions(root: Path) -> list[Session]:
    if not root.is_dir():
        return []
    return sorted((Session(root=root, name=p.name) for p in root.iterdir() if (p / "session.toml").is_file()),
                  key=lambda s: s.name)


def new_session_name() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


# -- the agent lock ------------------------------------------------------------------------------
class AgentLock:
    """flock on agent.lock, held for the agent's lifetime; the kernel frees it when the process dies.

    A stale file (its holder is dead, say after kill -9) is therefore simply taken over.
    """

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None
        self.took_over_from: int | None = None

    def acquire(self, wait: float = 0.0) -> "AgentLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    pid = _read_pid(fd)
                    os.close(fd)
                    raise SessionError(f"session is already run by an agent (pid {pid or '?'}, "
                                       f"holding {self.path}); stop it first with `steer stop`") from None
                time.sleep(0.1)
        previous = _read_pid(fd)
        if previous and previous != os.getpid():
            self.took_over_from = previous
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()} {int(time.time())}\n".encode(), 0)
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").split()
        return int(text[0]) if text else None
    except (OSError, ValueError):
        return None


def lock_holder(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        pid = _read_pid(fd)
        os.close(fd)
        return pid or -1
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    return None


# -- events.jsonl --------------------------------------------------------------------------------
class EventLog:
    """The agent's append side: one JSON line per event, flushed and fsynced before returning."""

    def __init__(self, path: Path):
        self.path = path
        self.repaired_bytes = self._repair()
        self.next_seq = self._last_seq() + 1
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _repair(self) -> int:
        """Cut a torn last line (a crash mid-write); returns how many bytes were cut."""
        if not self.path.exists():
            return 0
        size = self.path.stat().st_size
        if size == 0:
            return 0
        with open(self.path, "rb+") as f:
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return 0
            # find the last newline, reading backwards in blocks
            pos, block = size, 65536
            while pos > 0:
                start = max(0, pos - block)
                f.seek(start)
                chunk = f.read(pos - start)
                i = chunk.rfind(b"\n")
                if i >= 0:
                    cut = start + i + 1
                    break
                pos = start
            else:
                cut = 0
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())
            return size - cut

    def _last_seq(self) -> int:
        """The seq of the last event: read from the file's end (seqs grow in file order), so opening
        a 100,000-line log costs one block, not a full parse; a full scan only when the tail holds none."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        with open(self.path, "rb") as f:
            f.seek(max(0, size - TAIL_SCAN_BYTES))
            tail = f.read()
        lines = tail.split(b"\n")
        if size > TAIL_SCAN_BYTES:
            lines = lines[1:]  # the first piece may be the end of a longer line
        for line in reversed(lines):
            event = parse_line(line) if line.strip() else None
            if event is not None and event.seq > 0:
                return event.seq
        last = 0
        for event in EventReader(self.path).iter_all():
            last = max(last, event.seq)
        return last

    def append(self, event: Event) -> Event:
        """Write one event line and fsync it; on any error the file is as it was (no torn line), and it raises."""
        event.seq = self.next_seq
        event.ts = event.ts or time.time()
        line = encode_event(event)
        size = os.fstat(self._fd).st_size
        try:
            if faults.armed(f"append:{event.type}"):
                os.write(self._fd, line[: len(line) // 2])
                os.fsync(self._fd)
                faults.point(f"append:{event.type}")
            view = memoryview(line)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
        except OSError:
            # A half-written line would swallow the next event (they would share a line): cut it.
            try:
                os.ftruncate(self._fd, size)
            except OSError:
                pass
            raise
        self.next_seq += 1
        return event

    def unlinked(self) -> bool:
        """Whether the file this log appends to was deleted (its directory removed under a running agent)."""
        return self._fd is not None and os.fstat(self._fd).st_nlink == 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def encode_event(event: Event) -> bytes:
    """The event's line. One that readers would skip as over-long is shrunk instead: never lost."""
    d = event.to_json()
    line = (json.dumps(d, default=str, ensure_ascii=False) + "\n").encode()
    if len(line) <= MAX_LINE_BYTES:
        return line
    d = _shrink(d, MAX_FIELD_CHARS)
    d["truncated"] = True
    line = (json.dumps(d, default=str, ensure_ascii=False) + "\n").encode()
    if len(line) <= MAX_LINE_BYTES:
        return line
    kept = {k: v for k, v in d.items() if isinstance(v, (int, float, bool)) or v is None
            or (isinstance(v, str) and len(v) <= 256)}
    return (json.dumps(kept, default=str, ensure_ascii=False) + "\n").encode()


def _shrink(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f" [... {len(value) - limit} chars cut]"
    if isinstance(value, dict):
        return {k: _shrink(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink(v, limit) for v in value]
    return value


class EventReader:
    """Incremental reader: remembers a byte offset and returns only complete new lines.

    A torn last line waits for its newline; garbage lines and lines over MAX_LINE_BYTES are
    skipped and counted in `skipped`.
    """

    def __init__(self, path: Path, offset: int = 0):
        self.path = path
        self.offset = offset
        self.skipped = 0
        self._skipping_long = False

    def read_new(self, limit: int | None = None) -> list[Event]:
        events: list[Event] = []
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return events
        with f:
            f.seek(self.offset)
            while limit is None or len(events) < limit:
                line = f.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                if not line.endswith(b"\n"):
                    if len(line) > MAX_LINE_BYTES:
                        self._skipping_long = True
                        self.offset += len(line)
                        continue
                    break  # torn: wait for the rest
                self.offset += len(line)
                if self._skipping_long:  # the tail of an over-long line
                    self._skipping_long = False
                    self.skipped += 1
                    continue
                event = parse_line(line)
                if event is None:
                    if line.strip():
                        self.skipped += 1
                    continue
                events.append(event)
        return events

    def iter_all(self) -> Iterator[Event]:
        reader = EventReader(self.path)
        while batch := reader.read_new(limit=10_000):
            yield from batch
        self.skipped = reader.skipped


# -- inbox.jsonl -----------------------------------------------------------------------------------
def clean_text(text: str) -> str:
    """Steering text as stored: control characters dropped (newlines and tabs kept), length capped."""
    text = "".join(ch for ch in text if ch in "\n\t" or (ord(ch) >= 32 and ord(ch) != 127))
    return text.strip()[:MAX_STEERING_CHARS]


def append_inbox(session: Session, text: str, target: str | None = None, scope: str = "once",
                 sender: str = "cli") -> dict[str, Any]:
    """Append one steering line (prompt or /command) for the agent; returns the stored record."""
    if scope not in ("once", "standing"):
        raise SessionError(f"scope must be once or standing, not {scope!r}")
    cleaned = clean_text(text)
    if not cleaned:
        raise SessionError("empty steering text")
    record = {"id": "s" + secrets.token_hex(4), "ts": time.time(), "text": cleaned, "target": target,
              "scope": scope, "sender": sender, "truncated": len(text.strip()) > MAX_STEERING_CHARS}
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
    fd = os.open(session.inbox_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return record


def read_inbox(session: Session, offset: int = 0,
               skipped: list[int] | None = None) -> tuple[list[tuple[dict[str, Any], int]], int]:
    """Complete inbox records from `offset`: [(record, offset just past it)], and the new offset.

    A line over MAX_LINE_BYTES is passed over (its size appended to `skipped`), never waited on:
    it must not hold back the lines after it.
    """
    out: list[tuple[dict[str, Any], int]] = []
    try:
        f = open(session.inbox_path, "rb")
    except FileNotFoundError:
        return out, offset
    with f:
        f.seek(offset)
        while True:
            line = f.readline(MAX_LINE_BYTES + 1)
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                length = _rest_of_line(f, len(line))
                if length is None:
                    break          # still being written
                offset += length
                if skipped is not None:
                    skipped.append(length)
                continue
            if not line or not line.endswith(b"\n"):
                break
            offset += len(line)
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("text"), str) and rec.get("id"):
                out.append((rec, offset))
    return out, offset


def _rest_of_line(f: Any, length: int) -> int | None:
    """Read to the end of an over-long line; its whole length, or None if it has no newline yet."""
    while True:
        chunk = f.readline(1 << 20)
        if not chunk:
            return None
        length += len(chunk)
        if chunk.endswith(b"\n"):
            return length
