"""The steering pane: target/scope selectors, a prompt input with history and completion, and
the prompts sent so far with their state (queued → seen → used in #N, or rejected)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.suggester import Suggester
from textual.widgets import Input, Select, Static

from console import fmt
from console.model import ConsoleModel

ALL = "*"


@cache
def slash_commands() -> dict[str, tuple[str, str]]:
    """name -> (usage, what it does), from the agent's own list: it is the authority on commands.

    Imported on first use: agent.steering pulls in gitpython, which a first paint does not need."""
    from agent.steering import HELP
    out = {usage.split()[0][1:]: (usage, what) for usage, what in HELP.items()}
    out.setdefault("unfocus", ("/unfocus", "schedule every live branch again"))
    return out


@cache
def takes_branch() -> frozenset[str]:
    return frozenset(name for name, (usage, _) in slash_commands().items()
                     if usage.split()[1:2] in (["B"], ["B[@ITER|@SHA]"]))


STATUS_STYLE = {"queued": "cyan", "seen": "yellow", "used": "green", "rejected": "red", "dropped": "dim"}


class SteeringSuggester(Suggester):
    """Completes slash commands, then branch names after a command that takes one."""

    def __init__(self, branches: Callable[[], list[str]]) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.branches = branches

    async def get_suggestion(self, value: str) -> str | None:
        if not value.startswith("/"):
            return None
        head, sep, rest = value[1:].partition(" ")
        if not sep:
            hits = [c for c in slash_commands() if c.startswith(head)]
            return f"/{hits[0]} " if len(hits) >= 1 and head else None
        if head in takes_branch() and " " not in rest:
            hits = [b for b in self.branches() if b.startswith(rest)]
            return f"/{head} {hits[0]}" if hits else None
        return None


class SteeringInput(Input):
    """An Input with up/down history; Tab accepts the completion when there is one."""

    BINDINGS = [
        Binding("up", "history(-1)", "Previous prompt", show=False),
        Binding("down", "history(1)", "Next prompt", show=False),
        Binding("tab", "complete", "Complete", show=False),
    ]

    def __init__(self, history: Callable[[], list[str]], **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.history = history
        self._pos: int | None = None
        self.cursor_blink = False      # a steady cursor: nothing repaints twice a second over SSH

    def action_history(self, step: int) -> None:
        items = self.history()
        if not items:
            return
        pos = len(items) if self._pos is None else self._pos
        pos = max(0, min(len(items), pos + step))
        self._pos = pos
        self.value = items[pos] if pos < len(items) else ""
        self.cursor_position = len(self.value)

    def action_complete(self) -> None:
        if self._suggestion and self._suggestion != self.value:
            self.value = self._suggestion
            self.cursor_position = len(self.value)
        else:
            self.screen.focus_next()

    def forget_position(self) -> None:
        self._pos = None


class SteeringPane(Vertical):
    @dataclass
    class Submitted(Message):
        text: str
        target: str | None
        scope: str

    def __init__(self, model: Callable[[], ConsoleModel], **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._model = model
        self._version = -1
        self._branches: list[str] = []

    def compose(self) -> ComposeResult:
        with Horizontal(id="steer-row"):
            yield Select([("→ all", ALL)], allow_blank=False, value=ALL, compact=True, id="steer-target",
                         tooltip="Which branch the prompt is for")
            yield Select([("once", "once"), ("standing", "standing")], allow_blank=False, value="once",
                         compact=True, id="steer-scope", tooltip="once: the next iteration; standing: every one")
            yield SteeringInput(lambda: self._model().prompt_history(),
                                placeholder="prompt or /command (Enter sends, Tab completes)",
                                suggester=SteeringSuggester(lambda: self._model().branch_names()),
                                compact=True, select_on_focus=False, id="steer-input")
        yield Static(id="steer-prompts")

    @property
    def target(self) -> str | None:
        value = self.query_one("#steer-target", Select).value
        return None if value == ALL or value == Select.NULL else str(value)

    @property
    def scope(self) -> str:
        return str(self.query_one("#steer-scope", Select).value)

    def set_target(self, branch: str | None) -> None:
        select = self.query_one("#steer-target", Select)
        value = branch if branch in self._branches else ALL
        if select.value != value:
            select.value = value

    @on(Input.Submitted, "#steer-input")
    def send(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if not text:
            return
        box = self.query_one(SteeringInput)
        box.value = ""
        box.forget_position()
        command = text.startswith("/")
        # A slash command names its own branch; the selectors apply to prompts.
        self.post_message(self.Submitted(text, None if command else self.target, "once" if command else self.scope))

    def show(self, model: ConsoleModel) -> None:
        if model.versions["steering"] == self._version:
            return
        self._version = model.versions["steering"]
        branches = model.branch_names()
        if branches != self._branches:
            self._branches = branches
            select = self.query_one("#steer-target", Select)
            current = select.value
            select.set_options([("→ all", ALL)] + [(f"→ {b}", b) for b in branches])
            select.value = current if current in branches else ALL
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column(no_wrap=True, width=20)
        table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        rows = model.steering_rows(limit=30)
        for r in rows:
            scope = "" if r.scope == "once" else " ⟳"
            table.add_row(Text(fmt.short(r.detail, 20), style=STATUS_STYLE.get(r.status, "")),
                          Text(f"{r.text}  [{fmt.target(r.target)}{scope}]"))
        if not rows:
            table.add_row(Text("no prompts yet", style="dim"), "")
        self.query_one("#steer-prompts", Static).update(table)
