"""The activity pane: what the agent is doing right now, and the recent milestones and errors."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog, Static

from console import fmt
from console.model import ConsoleModel

LEVEL_STYLE = {"info": "", "good": "green", "warn": "yellow", "error": "bold red"}
LEVEL_MARK = {"info": " ", "good": "+", "warn": "!", "error": "✗"}


class ActivityPane(Vertical):
    DEFAULT_CSS = """
    ActivityPane > #activity-now { height: 1; }
    ActivityPane > RichLog { height: 1fr; scrollbar-size-vertical: 1; overflow-x: hidden; }
    """

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._written = 0
        self._now = ""

    def compose(self) -> ComposeResult:
        yield Static(id="activity-now")
        yield RichLog(max_lines=500, min_width=20, wrap=False, markup=False, auto_scroll=True, id="activity-log")

    def on_resize(self) -> None:
        self.query_one(RichLog).scroll_end(animate=False)

    def show(self, model: ConsoleModel) -> None:
        s = model.state
        now = Text(no_wrap=True, overflow="ellipsis")
        now.append("now: ", style="bold")
        if model.gone:
            now.append(model.gone, style="bold red")
        else:
            now.append(s.activity or ("waiting for the agent" if model.holder else "idle"))
        if now.plain != self._now:            # an unchanged line is not repainted (less traffic over SSH)
            self._now = now.plain
            self.query_one("#activity-now", Static).update(now)
        if model.activity_total == self._written:
            return
        log = self.query_one(RichLog)
        # at most 100 lines a repaint: the pane shows a few, and each line costs a render
        fresh = min(model.activity_total - self._written, len(model.activity), 100)
        for line in list(model.activity)[len(model.activity) - fresh:]:
            text = Text(no_wrap=True, overflow="ellipsis")
            text.append(f"{fmt.clock(line.ts)} {LEVEL_MARK[line.level]} ", style="dim")
            text.append(line.text, style=LEVEL_STYLE[line.level])
            log.write(text)
        self._written = model.activity_total
