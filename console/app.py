"""SteerApp: one view of one session, fed only by events.jsonl, steering only through inbox.jsonl.

In `attach` mode the agent runs elsewhere (detached). In `run` mode it runs in a thread worker
of this process, and quitting asks whether to stop it or hand it to a detached agent.
"""
from __future__ import annotations

import asyncio
import getpass
import threading
import time
from typing import Callable

from textual import on, work
from textual.app import App
from textual.binding import Binding
from textual.worker import Worker, WorkerState, get_current_worker

from agent.session import Session, SessionError, append_inbox
from console.alerts import Alert
from console.digest import SeenStore
from console.messages import EventsRead, HolderChanged, InboxRead, SessionGone, SessionLoaded
from console.model import ConsoleModel
from console.screens.main import MainScreen
from console.tail import SessionTail, TailCallbacks

AgentRunner = Callable[[threading.Event, threading.Event], str]   # (stop, abort) -> why it stopped
PAINT_EVERY = 0.1      # seconds: event floods repaint at most this often
ABORT_AFTER = 5.0      # seconds a stopping agent may take before its evaluation is interrupted


class SteerApp(App[str | None]):
    TITLE = "steer"
    BINDINGS = [
        Binding("ctrl+q", "request_quit", "Quit", id="quit-now", show=False, priority=True,
                tooltip="Quit (asks what to do with the agent in steer run)"),
    ]

    def __init__(self, session: Session, *, mode: str = "attach", runner: AgentRunner | None = None,
                 handoff: Callable[[], int] | None = None, alerts: bool = True, digest: bool = True,
                 clock: Callable[[], float] = time.time, seen: SeenStore | None = None,
                 tail: SessionTail | None = None) -> None:
        super().__init__()
        self.session = session
        self.mode = mode
        self.runner = runner
        self.handoff = handoff
        self.alerts = alerts
        self.show_digest = digest
        self.clock = clock
        self.seen = seen or SeenStore()
        self.model = ConsoleModel()          # empty until the backlog is folded (SessionLoaded)
        self.loaded = False
        self.load_seconds = 0.0
        self.agent_result: str | None = None
        self.main = MainScreen()
        # The CLI may have started folding the backlog already (SessionTail.preload).
        self.tail = tail or SessionTail(session, since_seq=self.seen.last_seen(session.dir))
        self._stop, self._abort = threading.Event(), threading.Event()
        self._leaving = False
        self._dirty = True
        self._painted_clock = 0.0
        self._quitting = False
        self._event_loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ------------------------------------------------------------------------------------
    def on_mount(self) -> None:
        self._event_loop = asyncio.get_running_loop()     # for signal handlers (SIGHUP), which must not touch widgets
        self.push_screen(self.main)
        self.set_interval(PAINT_EVERY, self._paint)
        self.set_interval(30.0, self._save_seen)
        self._tail()
        if self.mode == "run" and self.runner is not None:
            self._run_agent()

    def on_unmount(self) -> None:
        # However the app ends, a thread agent must end too, or the process would wait for it.
        self._stop.set()
        self._abort.set()
        self._save_seen()

    def _save_seen(self) -> None:
        if self.loaded and self.model.state.last_seq and not self.model.gone:
            self.seen.save(self.session.dir, self.model.state.last_seq)

    def _paint(self) -> None:
        now = self.clock()
        if self._dirty or now - self._painted_clock >= 1.0:
            self._dirty = False
            self._painted_clock = now
            self.main.refresh_panels(now)

    # -- workers: only post messages; the handlers below touch the UI ------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="tail", description="follow events.jsonl")
    def _tail(self) -> None:
        callbacks = TailCallbacks(
            loaded=lambda model, seconds: self.post_message(SessionLoaded(model, seconds)),
            events=lambda events: self.post_message(EventsRead(events)),
            inbox=lambda records: self.post_message(InboxRead(records)),
            holder=lambda pid: self.post_message(HolderChanged(pid)),
            gone=lambda reason: self.post_message(SessionGone(reason)),
        )
        stop = get_current_worker().cancelled_event      # set when the app shuts its workers down
        self.tail.run(stop, callbacks)

    @work(thread=True, exclusive=True, exit_on_error=False, group="agent", description="agent loop")
    def _run_agent(self) -> str:
        assert self.runner is not None
        return self.runner(self._stop, self._abort)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        group, state = event.worker.group, event.state
        if group == "agent" and state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            if state == WorkerState.SUCCESS:
                self.agent_result = str(event.worker.result)
                self.notify(f"the agent stopped: {self.agent_result}", title="Agent")
            elif state == WorkerState.ERROR:
                self.agent_result = f"error: {event.worker.error}"
                self.notify(f"the agent failed: {event.worker.error}", title="Agent", severity="error", timeout=30)
            if self._quitting:
                self._leave()
        elif group == "tail" and state == WorkerState.ERROR and not self._leaving:
            self.model.gone = f"reading the session failed: {event.worker.error}"
            self._dirty = True

    # -- what the tail reports ------------------------------------------------------------------------------
    @on(SessionLoaded)
    def adopt_model(self, message: SessionLoaded) -> None:
        self.model, self.loaded, self.load_seconds = message.model, True, message.seconds
        self._dirty = True
        self._paint()
        digest = self.model.digest
        if self.show_digest and digest is not None and not digest.empty:
            self.main.action_digest()

    @on(EventsRead)
    def fold_events(self, message: EventsRead) -> None:
        for alert in self.model.apply(message.events):
            self.raise_alert(alert)
        self._dirty = True

    @on(InboxRead)
    def add_inbox(self, message: InboxRead) -> None:
        self.model.add_inbox(message.records)
        self._dirty = True

    @on(HolderChanged)
    def note_holder(self, message: HolderChanged) -> None:
        self.model.holder = message.pid
        self.model.bump("header")
        self._dirty = True

    @on(SessionGone)
    def session_gone(self, message: SessionGone) -> None:
        self.model.gone = message.reason
        self.model.holder = None
        self.model.bump("header", "activity")
        self._dirty = True
        self.notify(message.reason, title="Session gone", severity="error", timeout=60)

    def raise_alert(self, alert: Alert) -> None:
        if self.alerts:
            self.bell()
            self.notify(alert.message, title=alert.title, severity=alert.severity)  # type: ignore[arg-type]

    # -- steering: the console's only write ------------------------------------------------------------------
    def send_steering(self, text: str, target: str | None, scope: str) -> None:
        if self.model.gone:
            self.notify("the session is gone; nothing was sent", severity="error")
            return
        try:
            record = append_inbox(self.session, text, target=target, scope=scope, sender=f"console:{_user()}")
        except (SessionError, OSError) as exc:
            self.notify(f"not sent: {exc}", severity="error")
            return
        self.model.add_inbox([record])
        self._dirty = True

    # -- quitting ---------------------------------------------------------------------------------------------
    def agent_running(self) -> bool:
        return any(w.group == "agent" and w.is_running for w in self.workers)

    def action_request_quit(self) -> None:
        if self._quitting:
            return
        if self.mode != "run" or not self.agent_running():
            self._leave()
            return

        def chosen(choice: str | None) -> None:
            if choice == "keep":
                self.keep_running()
            elif choice == "stop":
                self.stop_agent("stopping the agent …")

        from console.screens.dialogs import QuitDialog
        self.push_screen(QuitDialog(), chosen)

    def keep_running(self) -> None:
        """Hand over: a detached agent waits for the lock and resumes at the next iteration."""
        if self.handoff is None:
            self.notify("cannot start a detached agent here; stopping instead", severity="warning")
            self.stop_agent("stopping the agent …")
            return
        try:
            pid = self.handoff()
        except Exception as exc:  # noqa: BLE001 - report it and keep the agent running here
            self.notify(f"could not start a detached agent: {exc}", severity="error", timeout=30)
            return
        self.stop_agent(f"handing over to detached agent pid {pid} …")

    def hang_up(self) -> None:
        """The terminal went away (SIGHUP): keep the run going in a detached agent, without asking."""
        if self.mode == "run" and self.agent_running() and not self._quitting:
            self.keep_running()
        else:
            self._leave()

    def stop_agent(self, note: str) -> None:
        self._quitting = True
        self._stop.set()
        self.notify(note, timeout=30)
        self.set_timer(ABORT_AFTER, self._abort.set)   # a long evaluation is interrupted, not waited for
        if not self.agent_running():
            self._leave()

    def _leave(self) -> None:
        self._leaving = True
        self._save_seen()
        self.exit(self.agent_result)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return "?"
