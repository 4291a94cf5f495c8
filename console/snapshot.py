"""The screen as plain text (characters only, no colours): for snapshot tests and the tmux check."""
from __future__ import annotations

import io

from rich.console import Console
from textual.app import App


def screen_text(app: App[object]) -> str:
    """What the terminal shows now, one line per row, trailing spaces stripped."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, color_system=None,
                      record=True, legacy_windows=False, safe_box=False)
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    console.print(update)
    text = console.export_text(styles=False)
    return "\n".join(line.rstrip() for line in text.splitlines()[:height]) + "\n"
