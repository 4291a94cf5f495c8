""""Since you last looked": shown on attach when something happened after this user's last view."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from console.digest import Digest


class DigestScreen(ModalScreen[None]):
    CSS_PATH = "../digest.tcss"  # console/*.tcss: shipped as package data
    BINDINGS = [
        Binding("escape,enter,space,q", "dismiss", "Dismiss", id="digest-dismiss", tooltip="Back to the console"),
    ]

    def __init__(self, digest: Digest) -> None:
        super().__init__()
        self.digest = digest

    def compose(self) -> ComposeResult:
        body = VerticalScroll(id="digest-body")
        body.border_title = "Since you last looked"
        body.border_subtitle = "Enter/Escape dismisses"
        with body:
            text = Text()
            for i, line in enumerate(self.digest.lines()):
                style = "bold" if i == 0 or (line and not line.startswith(" ")) else ""
                text.append(line + "\n", style=style)
            yield Static(text, id="digest-text")
