"""The beam table: one row per branch, with its state, best time and how long since it gained."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from console import fmt
from console.model import ConsoleModel
from console.widgets.chart import COLORS as CHART_COLORS

STATE_STYLE = {"active": "green", "paused": "yellow", "killed": "dim"}
COLUMNS = ("branch", "family", "state", "best µs", "×base", "att", "since")


class BeamTable(DataTable[Text | str]):
    """Rows are keyed by branch name; the cursor stays on its branch across repaints."""

    def __init__(self, **kw: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)  # type: ignore[arg-type]
        self._version = -1

    def on_mount(self) -> None:
        for label in COLUMNS:
            self.add_column(label, key=label)

    @property
    def selected_branch(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:  # noqa: BLE001 - an empty or shrinking table has no valid cursor
            return None

    def select_branch(self, name: str) -> None:
        try:
            self.move_cursor(row=self.get_row_index(name))
        except Exception:  # noqa: BLE001 - unknown branch: leave the cursor where it is
            pass

    def show(self, model: ConsoleModel) -> None:
        if model.versions["beam"] == self._version:
            return
        self._version = model.versions["beam"]
        s = model.state
        keep = self.selected_branch
        self.clear()
        for k, b in enumerate(s.branches.values()):
            name = Text("● ", style=CHART_COLORS[k % len(CHART_COLORS)])
            name.append(("▶" if s.focus == b.name else "") + fmt.short(b.name, 22),
                        style="bold" if s.focus == b.name else "")
            sp = s.baseline_us / b.best_us if s.baseline_us and b.best_us else None
            since = str(b.since_gain) + (" ≈" if b.plateau else "")
            self.add_row(
                name,
                Text(fmt.short(b.family, 14)),
                Text(b.state, style=STATE_STYLE.get(b.state, "")),
                fmt.us(b.best_us),
                fmt.speedup(sp),
                str(b.attempts),
                Text(since, style="yellow" if b.plateau else ""),
                key=b.name,
            )
        if keep is not None and keep in s.branches:
            self.select_branch(keep)
