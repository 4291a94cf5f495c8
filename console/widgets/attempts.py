"""The attempts log: newest first, optionally one branch; Enter opens an attempt's detail."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from console import fmt
from console.model import ConsoleModel

VERDICT_STYLE = {"accepted": "green", "rejected": "", "failed": "red", "running": "cyan", "unfinished": "red"}
WINDOW = 300   # rows kept in the table; older attempts are reachable by number from the palette


class AttemptsLog(DataTable[Text | str]):
    def __init__(self, **kw: object) -> None:
        super().__init__(cursor_type="row", **kw)  # type: ignore[arg-type]
        self._key: tuple[int, str | None] = (-1, None)
        self.branch_filter: str | None = None
        self.total = 0

    def on_mount(self) -> None:
        for label in ("#", "branch", "verdict", "µs", "×base", "summary"):
            self.add_column(label, key=label)

    @property
    def selected_iteration(self) -> int | None:
        if not self.row_count:
            return None
        try:
            return int(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value or 0)
        except Exception:  # noqa: BLE001
            return None

    def show(self, model: ConsoleModel, force: bool = False) -> None:
        key = (model.versions["attempts"], self.branch_filter)
        if key == self._key and not force:
            return
        self._key = key
        rows, self.total = model.attempt_rows(self.branch_filter, WINDOW)
        keep = self.selected_iteration
        follow = self.cursor_row <= 0      # at the top: stay on the newest attempt
        self.clear()
        for a in rows:
            # "running" only while an agent runs; after it stopped, that iteration was never finished
            verdict = a.verdict if a.verdict != "running" or model.state.running else "unfinished"
            self.add_row(
                str(a.iteration),
                Text(fmt.short(a.branch, 18)),
                Text(f"{fmt.VERDICT_MARK.get(verdict, '?')} {verdict}", style=VERDICT_STYLE.get(verdict, "")),
                fmt.us(a.geomean_us),
                fmt.speedup(a.speedup),
                Text(fmt.short(a.summary or a.message, 120)),
                key=str(a.iteration),
            )
        if not follow and keep is not None:
            try:
                self.move_cursor(row=self.get_row_index(str(keep)), animate=False)
            except Exception:  # noqa: BLE001 - it scrolled out of the window
                pass
        where = self.branch_filter or "all branches"
        shown = f"{len(rows)} of {self.total}" if self.total > len(rows) else str(self.total)
        self.border_title = f"attempts · {where} · {shown}"
