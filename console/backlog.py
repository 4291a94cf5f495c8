"""Fold a long events.jsonl quickly, for the first paint of a console.

A 10,000-attempt session is ~60,000 lines and ~30 MB, most of it the harness JSON inside
`eval_finished`. The console needs none of that JSON to paint (the attempt detail reads
artifacts/<i>/eval.json, or the one line, on demand), nor any old `eval_progress` line (only
the latest can be "what the agent does now"). So, for the backlog only:
  - `eval_progress` lines are not parsed: only the last one can matter, and it is parsed if
    nothing that sets the activity came after it;
  - `eval_finished` lines are parsed without their `result` (the last field the agent writes);
    a line cut that way that does not parse is parsed whole.
Everything after the backlog is read by agent.session.EventReader from the offset this returns.
Lines are the same ones EventReader accepts: complete, at most MAX_LINE_BYTES, valid JSON.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from agent import events as ev
from agent.session import MAX_LINE_BYTES
from console.model import ConsoleModel

RESULT = b', "result": {'
BATCH = 5000
# the events whose fold sets SessionState.activity (so an earlier eval_progress is not "now")
_SETS_ACTIVITY = frozenset({"iteration_started", "proposal_made", "eval_finished", "attempt_committed",
                            "agent_stopped", "error"})
_SPECS: dict[type, tuple[frozenset[str], frozenset[str], dict[str, Any]]] = {}
_decode = json.JSONDecoder().decode


def _spec(cls: type) -> tuple[frozenset[str], frozenset[str], dict[str, Any]]:
    """(field names, required names, default factories) of an event class, computed once."""
    spec = _SPECS.get(cls)
    if spec is None:
        fs = [f for f in fields(cls) if f.name not in ("seq", "ts")]
        required = frozenset(f.name for f in fs if f.default is MISSING and f.default_factory is MISSING)
        factories = {f.name: f.default_factory for f in fs if f.default_factory is not MISSING}
        spec = _SPECS[cls] = (frozenset(f.name for f in fs), required, factories)
    return spec


def build(d: dict[str, Any]) -> ev.Event | None:
    """agent.events.event_from_json, faster: the parsed dict becomes the instance's __dict__
    (event classes are plain dataclasses; plain defaults are class attributes). Keys this
    version does not know stay as inert attributes. None for an unknown type or a line
    without a required field."""
    cls = ev.EVENT_TYPES.get(d.get("type"))  # type: ignore[arg-type]
    if cls is None or cls is ev.UnknownEvent:
        return None
    _, required, factories = _spec(cls)
    if not required <= d.keys():
        return None
    for k, factory in factories.items():
        if k not in d:
            d[k] = factory()
    if not isinstance(d.get("seq"), int) or not isinstance(d.get("ts"), (int, float)):
        try:
            d["seq"], d["ts"] = int(d.get("seq") or 0), float(d.get("ts") or 0.0)
        except (TypeError, ValueError):
            return None
    e = object.__new__(cls)
    e.__dict__ = d
    return e


def _parse(line: bytes, kind: bytes | None) -> ev.Event | None:
    try:
        if kind == b"eval_finished":
            cut = line.find(RESULT)
            if cut > 0:
                try:
                    return build(_decode(line[:cut].decode() + "}"))
                except ValueError:
                    pass
        d = _decode(line.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return build(d) if isinstance(d, dict) else None


def load_backlog(path: Path, model: ConsoleModel) -> int:
    """Fold every complete line of `path` into `model`; returns the byte offset just past them."""
    offset = 0
    batch: list[ev.Event] = []
    # The last eval_progress line not superseded by an event that sets the activity; when the file
    # ends in eval_progress lines, this is the last line, so its seq and ts are applied too.
    progress: bytes | None = None
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        model.finish_backlog()
        return 0
    with f:
        for line in f:
            if not line.endswith(b"\n"):
                break                  # torn: EventReader picks it up once it is whole
            offset += len(line)
            if len(line) > MAX_LINE_BYTES:
                continue
            at = line.find(b'"type": "eval_', 0, 120) + 14     # 13 when absent
            kind = None if at == 13 else b"eval_progress" if line[at] == 112 else b"eval_finished"
            if kind == b"eval_progress":
                progress = line
                continue
            e = _parse(line, kind)
            if e is None:
                continue
            if e.type in _SETS_ACTIVITY:
                progress = None
            batch.append(e)
            if len(batch) >= BATCH:
                model.apply(batch, backlog=True)
                batch = []
    if progress is not None:
        e = _parse(progress, b"eval_progress")
        if e is not None:
            batch.append(e)
    model.apply(batch, backlog=True)
    model.finish_backlog()
    return offset
