"""Steering: read inbox.jsonl between iterations, run slash commands, keep prompts until an iteration uses them.

Every inbox line gets `steering_received` (with the byte offset just past it, so a resumed
agent continues exactly there), then `steering_applied` (commands at once; prompts and /set
with the iteration that used them) or `steering_rejected` with the reason.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Callable

from agent import events as ev
from agent.beam import Beam, BeamError, resolve_branch
from agent.session import MAX_LINE_BYTES, Session, clean_text, read_inbox
from agent.state import KILLED, SessionState
from agent.summary import family_floors_text

HELP = {
    "/pause B": "stop scheduling branch B",
    "/resume B": "schedule branch B again",
    "/fork B[@ITER|@SHA] NAME": "new branch NAME from B's head or from an attempt",
    "/kill B": "retire branch B for good (its commits stay)",
    "/focus B": "run only B until /focus off (or /unfocus)",
    "/standing [TEXT]": "add TEXT as a standing prompt; alone: list standing prompts",
    "/drop ID": "remove a pending or standing prompt",
    "/set KEY=VALUE ...": "force CONFIG values from SPACE on the next attempt (--standing: keep them)",
    "/budget iterations=N hours=H cost=USD": "change the run's budgets",
    "/noise [2%|0.02|measured]": "set the smallest gain accepted, or go back to the measured floors; alone: show them",
    "/abort": "cancel the evaluation running now (the only thing that interrupts one)",
    "/stop": "stop the agent after the current evaluation",
    "/help": "this list",
}


@dataclass
class Directive:
    """A prompt or /set waiting for an iteration of its target."""
    id: str
    text: str
    target: str | None
    scope: str
    settings: dict[str, str] = field(default_factory=dict)   # raw /set values; coerced per branch

    @property
    def is_set(self) -> bool:
        return bool(self.settings)


class SteeringError(ValueError):
    """A steering line that cannot be applied; the message is the reason."""


def parse_settings(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in args:
        key, sep, value = a.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SteeringError(f"/set takes KEY=VALUE pairs, not {a!r}")
        out[key.strip()] = value.strip()
    if not out:
        raise SteeringError("/set takes at least one KEY=VALUE")
    return out


def parse_budget(args: list[str]) -> dict[str, float | None]:
    names = {"iterations": "max_iterations", "hours": "max_hours", "cost": "max_cost"}
    out: dict[str, float | None] = {}
    for a in args:
        key, _, value = a.partition("=")
        if key not in names:
            raise SteeringError(f"/budget knows iterations=, hours= and cost=, not {a!r}")
        if value in ("none", "off", ""):
            out[names[key]] = None
            continue
        try:
            number = float(value)
        except ValueError:
            raise SteeringError(f"/budget {key}= needs a number, not {value!r}") from None
        if number < 0:
            raise SteeringError(f"/budget {key}= must not be negative")
        out[names[key]] = int(number) if key == "iterations" else number
    if not out:
        raise SteeringError("/budget takes iterations=N, hours=H and/or cost=USD")
    return out


def parse_noise(args: list[str]) -> float | None:
    """`/noise 2%` or `/noise 0.02` -> 0.02; `/noise measured` -> None (the floor measured at setup)."""
    if len(args) != 1:
        raise SteeringError("usage: /noise 2% (or 0.02), or /noise measured")
    word = args[0].lower()
    if word in ("measured", "auto"):
        return None
    try:
        value = float(word[:-1]) / 100 if word.endswith("%") else float(word)
    except ValueError:
        raise SteeringError(f"/noise takes a percentage (2%), a fraction (0.02) or 'measured', "
                            f"not {args[0]!r}") from None
    if not 0 <= value < 1:
        raise SteeringError(f"/noise {args[0]}: the floor is a fraction of the head's time from 0 to 1 (0.02 or 2%)")
    return value


def _clean_id(raw: object) -> str:
    return clean_text(str(raw))[:64] or "s?"


class Steering:
    """The agent's side of the inbox. `check_set(branch, settings)` validates /set against a branch's SPACE."""

    def __init__(self, session: Session, state: SessionState, beam: Beam, emit: Callable[[ev.Event], ev.Event],
                 check_set: Callable[[str, dict[str, str]], dict[str, Any]],
                 set_budget: Callable[[dict[str, float | None]], str],
                 set_noise: Callable[[float | None], float]):
        self.session = session
        self.state = state
        self.beam = beam
        self.emit = emit
        self.check_set = check_set
        self.set_budget = set_budget
        self.set_noise = set_noise   # applies a floor (None: the measured one); returns the floor now in force
        self.offset = state.inbox_offset
        self.pending: dict[str, Directive] = {}
        self.stop_requested = False
        self.abort_acted: dict[str, int] = {}   # /abort lines acted on while an evaluation ran -> iteration

    # -- resume ------------------------------------------------------------------------------
    def restore(self) -> None:
        """Pending prompts from the events; a command received but never applied (a crash) runs now."""
        for s in list(self.state.steering.values()):
            standing_used = s.scope == "standing" and s.status == "used"
            if s.status != "seen" and not standing_used:
                continue
            if s.text.startswith("/") and not s.text.startswith(("/set", "/standing ")):
                if s.status == "seen":
                    self._command(s.id, s.text, s.target, s.scope)
                continue
            self._queue(s.id, s.text, s.target, s.scope, announce=False)

    # -- reading -----------------------------------------------------------------------------
    def drain(self) -> int:
        skipped: list[int] = []
        records, end_of_inbox = read_inbox(self.session, self.offset, skipped)
        for size in skipped:
            self.emit(ev.ErrorEvent(where="steering", message=f"an inbox line of {size} bytes was skipped: "
                                                             f"over the {MAX_LINE_BYTES >> 20} MB limit"))
        for rec, end in records:
            # Anything may write the inbox: clean here too, not only in `steer say` and the console.
            text, target = clean_text(str(rec["text"])), (clean_text(str(rec.get("target") or ""))[:200] or None)
            sid = _clean_id(rec["id"])
            scope = str(rec.get("scope")) if rec.get("scope") in ("once", "standing") else "once"
            kind = "command" if text.startswith("/") else "prompt"
            if text.startswith("/standing ") and text[len("/standing "):].strip():
                scope = "standing"
            self.emit(ev.SteeringReceived(id=sid, text=text, target=target, scope=scope, kind=kind, inbox_offset=end))
            self.offset = end
            if not text:
                self._reject(sid, "empty steering text (nothing left after removing control characters)")
            elif kind == "command":
                self._command(sid, text, target, scope)
            else:
                self._queue(sid, text, target, scope)
        self.offset = max(self.offset, end_of_inbox)   # past skipped and unreadable lines too
        return len(records)

    def peek_aborts(self) -> list[str]:
        """Ids of /abort lines written since the last drain and not yet acted on (read during an evaluation)."""
        records, _ = read_inbox(self.session, self.offset)
        return [_clean_id(r["id"]) for r, _ in records
                if str(r["text"]).strip().split()[:1] == ["/abort"] and _clean_id(r["id"]) not in self.abort_acted]

    def _reject(self, sid: str, reason: str) -> None:
        self.emit(ev.SteeringRejected(id=sid, reason=reason))

    def _queue(self, sid: str, text: str, target: str | None, scope: str, announce: bool = True) -> None:
        try:
            branch = resolve_branch(self.state, target) if target else None
            if branch and self.state.branches[branch].state == KILLED:
                raise BeamError(f"branch {branch} was killed")
            settings: dict[str, str] = {}
            if text.startswith("/set"):
                settings = parse_settings(shlex.split(text)[1:])
                self._validate_set(branch, settings)
            elif text.startswith("/standing "):
                text, scope = text[len("/standing "):].strip(), "standing"
        except (BeamError, SteeringError, ValueError) as exc:
            self._reject(sid, str(exc))
            return
        self.pending[sid] = Directive(id=sid, text=text, target=branch, scope=scope, settings=settings)

    def _validate_set(self, branch: str | None, settings: dict[str, str]) -> None:
        branches = [branch] if branch else [b.name for b in self.state.live_branches()]
        errors = []
        for name in branches:
            try:
                self.check_set(name, settings)
                return
            except ValueError as exc:
                errors.append(f"{name}: {exc}")
        raise SteeringError("; ".join(errors) if errors else "no live branch to apply /set to")

    # -- commands ----------------------------------------------------------------------------
    def _command(self, sid: str, text: str, target: str | None, scope: str) -> None:
        try:
            words = shlex.split(text)
        except ValueError as exc:
            self._reject(sid, f"cannot parse the command: {exc}")
            return
        name, args = words[0].lower(), words[1:]
        if name in ("/set", "/standing") and (args or name == "/set"):
            self._queue(sid, text, target, scope)
            return
        try:
            detail, branch = self._run(sid, name, args, target)
        except (BeamError, SteeringError) as exc:
            self._reject(sid, str(exc))
            return
        self.emit(ev.SteeringApplied(id=sid, iteration=None, branch=branch, detail=detail))

    def _run(self, sid: str, name: str, args: list[str], target: str | None) -> tuple[str, str | None]:
        one = args[0] if args else target
        if name in ("/pause", "/resume", "/kill"):
            if not one or len(args) > 1:
                raise SteeringError(f"usage: {name} BRANCH")
            branch = resolve_branch(self.state, one)
            if name == "/pause":
                return self.beam.pause(branch, reason="paused by steering", steering_id=sid), branch
            if name == "/resume":
                return self.beam.resume(branch, steering_id=sid), branch
            return self.beam.kill(branch, steering_id=sid), branch
        if name == "/focus":
            return self.beam.focus(one if one else None, steering_id=sid), one
        if name == "/unfocus":
            return self.beam.focus(None, steering_id=sid), None
        if name == "/fork":
            if len(args) != 2:
                raise SteeringError("usage: /fork BRANCH[@ITERATION|@SHA] NEW_NAME")
            return self.beam.fork(args[0], args[1], steering_id=sid), args[1]
        if name == "/standing":
            standing = [d for d in self.pending.values() if d.scope == "standing"]
            listing = "; ".join(f"{d.id}: {d.text}" for d in standing) or "no standing prompts"
            return listing, None
        if name == "/drop":
            if len(args) != 1:
                raise SteeringError("usage: /drop ID")
            if args[0] not in self.pending:
                raise SteeringError(f"no pending or standing prompt {args[0]!r}")
            self.pending.pop(args[0])
            self.emit(ev.SteeringDropped(id=args[0], by=sid))
            return f"dropped {args[0]}", None
        if name == "/budget":
            return self.set_budget(parse_budget(args)), None
        if name == "/noise":
            return self._noise(sid, args), None
        if name == "/abort":
            if sid in self.abort_acted:
                return f"aborted the evaluation of #{self.abort_acted[sid]}", None
            return "no evaluation was running", None
        if name == "/stop":
            self.stop_requested = True
            return "the agent stops after the current evaluation", None
        if name == "/help":
            return "; ".join(f"{k}: {v}" for k, v in HELP.items()), None
        raise SteeringError(f"unknown command {name} (try /help)")

    def _noise(self, sid: str, args: list[str]) -> str:
        floor = self.state.floor
        now = f"{100 * floor[0]:.1f}% ({floor[1]})" if floor else "1.0% (the fixed floor; none measured)"
        if not args:
            families = family_floors_text(self.state)
            return f"noise floor {now}" + (f"; by family: {families}" if families else "")
        value = parse_noise(args)
        if value is None and self.state.noise_floor is None:
            raise SteeringError("no noise floor was measured in this session (it was set with --noise-floor)")
        in_force = self.set_noise(value)
        self.emit(ev.NoiseFloorSet(floor=value, steering_id=sid))
        families = family_floors_text(self.state) if value is None else ""   # back in force, one per family
        return (f"noise floor {100 * in_force:.1f}%" + (" (measured)" if value is None else "") + f", was {now}"
                + (f"; by family: {families}" if families else ""))

    # -- use by iterations -------------------------------------------------------------------
    def for_branch(self, branch: str) -> list[Directive]:
        return [d for d in self.pending.values() if d.target in (None, branch)]

    def settings_for(self, branch: str, directives: list[Directive]) -> dict[str, Any]:
        """The /set values that apply to this branch (coerced to its SPACE; keys it lacks are skipped)."""
        out: dict[str, Any] = {}
        for d in directives:
            for key, raw in d.settings.items():
                try:
                    out.update(self.check_set(branch, {key: raw}))
                except ValueError:
                    continue
        return out

    def used(self, directives: list[Directive], iteration: int, branch: str) -> None:
        for d in directives:
            self.emit(ev.SteeringApplied(id=d.id, iteration=iteration, branch=branch,
                                         detail="standing" if d.scope == "standing" else ""))
            if d.scope != "standing":
                self.pending.pop(d.id, None)
