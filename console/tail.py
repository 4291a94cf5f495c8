"""Follow a session directory: watchdog wakes a loop that reads only what was appended.

`SessionTail.run` is meant for one background thread. It folds the backlog into a fresh
ConsoleModel (off the UI thread), hands it over once, then hands over new events in batches.
A burst of writes is coalesced (a short wait after the first wake-up); a slow poll covers
file systems where inotify says nothing. Nothing here imports Textual.
"""
from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from agent.events import Event
from agent.session import EventReader, Session, lock_holder, read_inbox
from console.backlog import load_backlog
from console.model import ConsoleModel

try:
    from watchdog.events import FileSystemEvent, FileSystemEventHandler
    from watchdog.observers import Observer
except ImportError:  # pragma: no cover - watchdog is a dependency; polling still works without it
    Observer = None  # type: ignore[assignment,misc]
    FileSystemEventHandler = object  # type: ignore[assignment,misc]


BATCH = 5000           # events per message while catching up: the UI stays responsive between batches


class _Wake(FileSystemEventHandler):  # type: ignore[misc,valid-type]
    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self.event = event

    def on_any_event(self, event: "FileSystemEvent") -> None:
        self.event.set()


@dataclass
class TailCallbacks:
    """Called from the tail thread; a UI must only post messages from these."""
    loaded: Callable[[ConsoleModel, float], None]        # the folded backlog, seconds it took
    events: Callable[[list[Event]], None]
    inbox: Callable[[list[dict[str, Any]]], None]
    holder: Callable[[int | None], None]
    gone: Callable[[str], None]


class SessionTail:
    def __init__(self, session: Session, since_seq: int | None = None, debounce: float = 0.03,
                 poll: float = 1.0) -> None:
        self.session = session
        self.since_seq = since_seq
        self.debounce, self.poll = debounce, poll
        self.wake = threading.Event()
        self.reader = EventReader(session.events_path)
        self.inbox_offset = 0
        self.cb: TailCallbacks | None = None
        self._holder: int | None = None
        self._preload: threading.Thread | None = None
        self._loaded: tuple[ConsoleModel, float] | None = None

    def load(self) -> ConsoleModel:
        """Fold everything written so far (streaming: the backlog is never held in memory)."""
        model = ConsoleModel(self.since_seq)
        self.reader.offset = load_backlog(self.session.events_path, model)
        records, self.inbox_offset = read_inbox(self.session, 0)
        model.add_inbox(r for r, _ in records)
        model.holder = self._holder = self.session.holder()
        return model

    def _timed_load(self) -> None:
        t0 = time.perf_counter()
        model = self.load()
        self._loaded = (model, time.perf_counter() - t0)

    def preload(self) -> "SessionTail":
        """Start folding the backlog now, while the UI is still being imported and built.

        Folding is pure-Python CPU work, so a thread would only take turns with the UI under the
        GIL. Where the process can still fork safely (one thread), a child process folds and hands
        back the pickled model: on two or more cores the fold and the UI start up side by side.
        Otherwise, or if the child fails, it is a thread, or the fold happens in run()."""
        if hasattr(os, "fork") and threading.active_count() == 1:
            self._preload = threading.Thread(target=self._fork_load, name="steer-preload", daemon=True)
        else:
            self._preload = threading.Thread(target=self._timed_load, name="steer-preload", daemon=True)
        self._preload.start()
        return self

    def _fork_load(self) -> None:
        t0 = time.perf_counter()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:                      # the child: fold, send, and leave without any cleanup
            code = 1
            try:
                os.close(read_end)
                model = self.load()
                data = pickle.dumps((model, self.reader.offset, self.inbox_offset, self._holder),
                                    protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_end, "wb") as f:
                    f.write(data)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        try:
            model, self.reader.offset, self.inbox_offset, self._holder = pickle.loads(data)
        except Exception:  # noqa: BLE001 - the child died or sent nothing usable: fold here instead
            self._timed_load()
            return
        self._loaded = (model, time.perf_counter() - t0)

    def run(self, stop: threading.Event, callbacks: TailCallbacks) -> None:
        self.cb = callbacks
        observer = self._watch()
        try:
            if self._preload is not None:
                self._preload.join()
            if self._loaded is None:
                self._timed_load()
            assert self._loaded is not None
            self.cb.loaded(*self._loaded)
            self._loaded = None          # from now on the UI owns the model
            self.wake.set()              # whatever was appended while loading is read at once
            while not stop.is_set():
                if self.wake.wait(self.poll):
                    self.wake.clear()
                    stop.wait(self.debounce)     # let a burst finish: one read, one repaint
                if stop.is_set():
                    break
                why = self._gone()
                if why:
                    self.cb.gone(why)
                    break
                self.step()
        finally:
            if observer is not None:
                try:
                    observer.stop()
                    observer.join(timeout=1.0)
                except Exception:  # noqa: BLE001 - a dying watcher must not take the console down
                    pass

    def step(self) -> None:
        """Read what was appended since the last step and report it."""
        assert self.cb is not None
        while batch := self.reader.read_new(limit=BATCH):
            self.cb.events(batch)
        records, self.inbox_offset = read_inbox(self.session, self.inbox_offset)
        if records:
            self.cb.inbox([r for r, _ in records])
        holder = lock_holder(self.session.lock_path)
        if holder != self._holder:
            self._holder = holder
            self.cb.holder(holder)

    def _gone(self) -> str:
        path = self.session.events_path
        if not self.session.dir.is_dir():
            return f"the session directory {self.session.dir} was deleted"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return f"{path} was deleted"
        if size < self.reader.offset:
            return f"{path} shrank from {self.reader.offset} to {size} bytes (replaced or truncated)"
        return ""

    def _watch(self) -> Any:
        if Observer is None:
            return None
        # A watch whose directory was deleted logs an error from watchdog's thread; the console
        # reports a deleted session itself, in its own words.
        logging.getLogger("watchdog").setLevel(logging.CRITICAL)
        try:
            observer = Observer()
            observer.daemon = True
            observer.schedule(_Wake(self.wake), str(self.session.dir), recursive=False)
            observer.start()
            return observer
        except Exception:  # noqa: BLE001 - e.g. inotify watch limit reached: the poll still works
            return None
