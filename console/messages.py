"""Messages the background workers post to the app; only the app's handlers touch widgets."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from agent.events import Event
from console.model import ConsoleModel


@dataclass
class SessionLoaded(Message):
    """The backlog of events.jsonl, folded off the UI thread; from now on the UI owns `model`."""
    model: ConsoleModel
    seconds: float


@dataclass
class EventsRead(Message):
    """Events appended since the last read, in file order."""
    events: list[Event]


@dataclass
class InboxRead(Message):
    """Steering lines appended to inbox.jsonl (by this console or anyone else)."""
    records: list[dict[str, Any]]


@dataclass
class HolderChanged(Message):
    """The pid holding agent.lock changed (None: no agent runs the session)."""
    pid: int | None


@dataclass
class SessionGone(Message):
    """The session can no longer be read (its directory was deleted, say)."""
    reason: str


@dataclass
class AttemptChosen(Message):
    """Open the detail of this iteration."""
    iteration: int
