"""F1/?: the keys of the main screen and the slash commands the agent understands."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from console.widgets.steering import slash_commands

KEYS = (
    ("space", "pause or resume the branch selected in the beam table (sends /pause B or /resume B)"),
    ("f", "fork the selected branch (asks for the new name)"),
    ("x", "kill the selected branch (asks to confirm)"),
    ("s or /", "type a steering prompt; the selectors on its left pick the target and scope"),
    ("Tab / →", "in the prompt: complete a slash command or branch name"),
    ("↑ / ↓", "in the prompt: earlier prompts"),
    ("Escape", "leave the prompt"),
    ("Enter or d", "open the selected attempt: diff, per-case times, errors, transcript"),
    ("b", "show only the selected branch in the attempts log (again: all)"),
    ("t", "chart x axis: iterations or wall time"),
    ("a", "switch alerts (bell and notifications) on or off"),
    ("g", "show the 'since you last looked' digest again"),
    ("Tab / Shift+Tab", "move between panels"),
    ("Ctrl+P", "command palette: every other action"),
    ("? or F1", "this help"),
    ("q", "quit (in `steer run`: stop the agent or keep it running)"),
)


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "../help.tcss"  # console/*.tcss: shipped as package data
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close", id="help-close", tooltip="Close help")]

    def compose(self) -> ComposeResult:
        keys = Table(title="Keys", title_justify="left", show_header=False, box=None, padding=(0, 2))
        for key, what in KEYS:
            keys.add_row(Text(key, style="bold"), what)
        cmds = Table(title="Steering commands (type them in the prompt)", title_justify="left",
                     show_header=False, box=None, padding=(0, 2))
        for usage, what in slash_commands().values():
            cmds.add_row(Text(usage, style="bold"), what)
        with VerticalScroll(id="help-body"):
            yield Static(keys)
            yield Static(cmds)
            yield Static("A prompt without a slash is free text for the proposer: [b]once[/b] applies it to the "
                         "next iteration of its target, [b]standing[/b] to every one until /drop. Its state "
                         "shows under the prompt: queued → seen → used in #N, or rejected with the reason.",
                         classes="note")
            yield Static("Escape closes.", classes="note")
