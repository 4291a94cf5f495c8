"""Small modal questions: a fork's name, a kill's confirmation, stop-or-keep on quit."""
from __future__ import annotations

import re

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

BRANCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$")


class ForkDialog(ModalScreen[str | None]):
    """Ask for the new branch's name; returns it, or None when cancelled."""
    CSS_PATH = "../dialogs.tcss"  # console/*.tcss: shipped as package data
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="fork-cancel", tooltip="Do not fork")]

    def __init__(self, branch: str) -> None:
        super().__init__()
        self.branch = branch

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text.assemble("Fork ", (self.branch, "bold"), " as:"))
            yield Input(placeholder="new branch name (Enter forks, Escape cancels)", id="fork-name",
                        compact=True)
            yield Label("", id="fork-error", classes="error")

    @on(Input.Submitted, "#fork-name")
    def submit(self, event: Input.Submitted) -> None:
        name = event.value.strip()
        if not BRANCH_NAME.match(name):
            self.query_one("#fork-error", Label).update("use letters, digits and . _ / - (at most 64)")
            return
        self.dismiss(name)


class ConfirmDialog(ModalScreen[bool]):
    """Yes/no; `y` or Enter on Yes confirms, `n` or Escape declines."""
    CSS_PATH = "../dialogs.tcss"  # console/*.tcss: shipped as package data
    BINDINGS = [
        Binding("y", "dismiss(True)", "Yes", id="confirm-yes", tooltip="Confirm"),
        Binding("n,escape", "dismiss(False)", "No", id="confirm-no", tooltip="Cancel"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.question))
            with Horizontal(classes="buttons"):
                yield Button("No (n)", id="no", variant="primary", compact=True)
                yield Button("Yes (y)", id="yes", variant="error", compact=True)

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def answer(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class QuitDialog(ModalScreen[str | None]):
    """In `steer run`: stop the agent, or keep it running detached. Returns "stop", "keep" or None."""
    CSS_PATH = "../dialogs.tcss"  # console/*.tcss: shipped as package data
    BINDINGS = [
        Binding("s", "dismiss('stop')", "Stop agent", id="quit-stop", tooltip="Stop the agent and quit"),
        Binding("k", "dismiss('keep')", "Keep running", id="quit-keep",
                tooltip="Hand the run to a detached agent, then quit"),
        Binding("escape", "dismiss(None)", "Cancel", id="quit-cancel", tooltip="Back to the console"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Quit: stop the agent, or keep it running in the background?")
            yield Label("Keep hands the session to a detached agent that resumes at the next iteration; "
                        "`steer attach` brings you back.", classes="hint")
            with Horizontal(classes="buttons"):
                yield Button("Keep running (k)", id="keep", variant="primary", compact=True)
                yield Button("Stop agent (s)", id="stop", variant="error", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#keep", Button).focus()

    @on(Button.Pressed)
    def answer(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)
