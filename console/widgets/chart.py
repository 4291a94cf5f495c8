"""The timing chart: per branch a best-so-far step line and attempt dots, on a log µs axis.

Failed attempts (no trustworthy time) are drawn as ✗ along the top edge; the baseline is a
horizontal line; each steering prompt is a vertical line at the iteration that first used it.
Points are thinned to one per character cell, so 10^4 attempts draw as fast as 10^2.
"""
from __future__ import annotations

import math

from textual.reactive import reactive
from textual_plotext import PlotextPlot

from console import fmt
from console.model import BranchSeries, ConsoleModel

COLORS = ("cyan", "magenta", "green", "orange", "blue", "red", "yellow", "white")
MAX_MARKS = 24


def thin(xs: list[float], ys: list[float], x0: float, x1: float, y0: float, y1: float,
         cols: int, rows: int) -> tuple[list[float], list[float]]:
    """Keep one point per (column, row) cell of a log-y canvas; the order is kept."""
    if len(xs) <= cols:
        return xs, ys
    seen: set[tuple[int, int]] = set()
    out_x: list[float] = []
    out_y: list[float] = []
    sx = cols / ((x1 - x0) or 1.0)
    ly0 = math.log(y0)
    sy = rows / ((math.log(y1) - ly0) or 1.0)
    for x, y in zip(xs, ys):
        cell = (int((x - x0) * sx), int((math.log(y) - ly0) * sy))
        if cell not in seen:
            seen.add(cell)
            out_x.append(x)
            out_y.append(y)
    return out_x, out_y


def step_line(xs: list[float], ys: list[float], x0: float, x1: float, x_end: float,
              cols: int) -> tuple[list[float], list[float]]:
    """The best-so-far staircase through (xs, ys), to x_end. Gains that fall in one of `cols`
    columns merge into the last of them: plotext draws every segment point by point, and a
    long run has thousands of gains but the chart only so many columns."""
    scale = cols / ((x1 - x0) or 1.0)
    px: list[float] = []
    py: list[float] = []
    last_cell = None
    for x, y in zip(xs, ys):
        cell = int((x - x0) * scale)
        if cell == last_cell:
            py[-1] = y          # same column: only the level it ends at shows
            continue
        if px:
            px.append(x)
            py.append(py[-1])
        px.append(x)
        py.append(y)
        last_cell = cell
    px.append(max(x_end, px[-1]))
    py.append(py[-1])
    return px, py


def int_ticks(x0: float, x1: float, n: int) -> list[float]:
    """At most about n whole-number ticks on 1-2-5 steps (iterations are whole)."""
    span, step, k = max(1.0, x1 - x0), 1.0, 0
    while span / step > n:
        step *= (2.0, 2.5, 2.0)[k % 3]      # 1, 2, 5, 10, 20, 50, ...
        k += 1
    first = math.ceil(x0 / step) * step
    return [first + i * step for i in range(int((x1 - first) // step) + 1)]


def log_ticks(y0: float, y1: float, n: int) -> list[float]:
    """n ticks evenly spaced on a log axis, rounded to two significant digits."""
    out: list[float] = []
    for k in range(n):
        v = y0 * (y1 / y0) ** ((k + 0.5) / n)
        digits = 10 ** (math.floor(math.log10(v)) - 1)
        out.append(round(v / digits) * digits)
    return out


class TimingChart(PlotextPlot):
    x_axis: reactive[str] = reactive("iteration")   # iteration | time

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._key: tuple[int, str, int, int] = (-1, "", 0, 0)
        self._model: ConsoleModel | None = None
        self._seconds = 1.0
        self.border_title = "timing · log µs · x: iteration"

    def watch_x_axis(self) -> None:
        if self._model is not None:
            self.show(self._model)

    def on_resize(self) -> None:
        if self._model is not None:
            self.show(self._model)

    def show(self, model: ConsoleModel) -> None:
        self._model = model
        key = (model.versions["chart"], self.x_axis, self.size.width, self.size.height)
        if key == self._key:
            return
        self._key = key
        self._draw(model)
        self.refresh()

    def _x(self, model: ConsoleModel, iterations: list[int], stamps: list[float]) -> list[float]:
        if self.x_axis == "iteration":
            return [float(i) for i in iterations]
        t0 = model.state.started_ts or (stamps[0] if stamps else 0.0)
        return [(t - t0) / self._seconds for t in stamps]

    def _pick_unit(self, model: ConsoleModel) -> str:
        """iteration, or wall time in minutes (runs under two hours) or hours since the start."""
        if self.x_axis == "iteration":
            self._seconds = 1.0
            return "iteration"
        self._seconds = 60.0 if model.state.elapsed_s() < 7200 else 3600.0
        return "minutes" if self._seconds == 60.0 else "hours"

    def _draw(self, model: ConsoleModel) -> None:
        self.border_title = f"timing · log µs · x: {self._pick_unit(model)}"
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        s = model.state
        series = [(name, model.series[name]) for name in s.branches if name in model.series]
        ys = [y for _, b in series for y in b.us] + [g.us for _, b in series for g in b.gains]
        if s.baseline_us:
            ys.append(s.baseline_us)
        if not ys:
            plt.title("no timings yet")
            return
        y0, y1 = min(ys) * 0.9, max(ys) * 1.25
        x_end = self._x(model, [s.iteration], [s.last_ts])[0]
        xs_all = [x for _, b in series for x in self._x(model, b.it, b.ts)] + [x_end, 0.0]
        x0, x1 = min(xs_all), max(xs_all)
        cols, rows = max(10, self.size.width - 10), max(4, self.size.height - 3)
        for k, (name, b) in enumerate(series):
            color = COLORS[k % len(COLORS)]
            self._branch(plt, model, name, b, color, (x0, x1, y0, y1, x_end, cols, rows))
        if s.baseline_us:
            plt.hline(s.baseline_us, "gray")
        for m in model.marks[-MAX_MARKS:]:
            x = self._x(model, [m.iteration], [m.ts])[0]
            plt.vline(x, "yellow")
        plt.yscale("log")
        ticks = log_ticks(y0, y1, max(2, min(5, self.size.height // 4)))
        plt.yticks(ticks, [fmt.compact(t) for t in ticks])
        plt.xlim(x0, max(x1, x0 + 1e-6))
        if x1 - x0 >= 2:            # whole iterations, minutes or hours
            xt = int_ticks(x0, x1, max(2, min(8, self.size.width // 12)))
            plt.xticks(xt, [str(int(t)) for t in xt])

    def _branch(self, plt: object, model: ConsoleModel, name: str, b: BranchSeries, color: str,
                box: tuple[float, float, float, float, float, int, int]) -> None:
        x0, x1, y0, y1, x_end, cols, rows = box
        xs = self._x(model, b.it, b.ts)
        if xs:
            tx, ty = thin(xs, b.us, x0, x1, y0, y1, cols, rows)
            plt.scatter(tx, ty, marker="dot", color=color)  # type: ignore[attr-defined]
        if b.fail_it:
            fx = self._x(model, b.fail_it, b.fail_ts)
            fx, fy = thin(fx, [y1 / 1.05] * len(fx), x0, x1, y0, y1, cols, rows)
            plt.scatter(fx, fy, marker="x", color=color)  # type: ignore[attr-defined]
        if b.gains:
            gx = self._x(model, [g.iteration for g in b.gains], [g.ts for g in b.gains])
            sx, sy = step_line(gx, [g.us for g in b.gains], x0, x1, x_end, cols * 2)
            plt.plot(sx, sy, marker="braille", color=color)  # type: ignore[attr-defined]
