"""The two-line header: which session, which agent, and how the run is going."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from console import fmt
from console.model import ConsoleModel


class SessionHeader(Static):
    DEFAULT_CSS = """
    SessionHeader {
        height: 2;
        background: $panel;
        color: $foreground;
        padding: 0 1;
    }
    """

    _shown = ""
    _last: tuple[ConsoleModel, float] | None = None

    def on_resize(self) -> None:
        if self._last is not None:   # which fields fit depends on the width
            self.show(*self._last)

    def show(self, model: ConsoleModel, now: float) -> None:
        self._last = (model, now)
        s = model.state
        live = model.holder is not None and not model.gone
        line1 = Text(no_wrap=True, overflow="ellipsis")
        line1.append(s.name or "?", style="bold")
        line1.append(f" │ task {s.task or '?'} │ {s.proposer or '?'}" + (f" {s.model}" if s.model else ""))
        line1.append(f" │ {s.device_name or s.device or '?'} │")
        if model.gone:
            line1.append(" ✗ session gone", style="bold red")
        elif live:
            line1.append(f" ● agent pid {model.holder}" if (model.holder or 0) > 0 else " ● agent", style="green")
        else:
            line1.append(" ○ no agent" + (f" ({s.stop_reason})" if s.stop_reason else ""), style="yellow")
        # A live run's clock keeps ticking; a stopped one ends at its last event.
        end = now if live and s.started_ts else s.last_ts
        elapsed = max(0.0, end - s.started_ts) if s.started_ts else 0.0
        rate = s.evaluations / (elapsed / 3600) if elapsed > 60 and s.evaluations else None
        line2 = Text(no_wrap=True, overflow="ellipsis")
        line2.append(f"{fmt.duration(elapsed)} │ #{s.iteration} │ ")
        line2.append(f"{rate:.0f} evals/h │ " if rate else "— evals/h │ ")
        line2.append("best ")
        line2.append(f"{fmt.us(s.best_us)} µs {fmt.speedup(s.best_speedup)}", style="bold")
        rest = [f" │ noise floor {100 * s.floor[0]:.1f}%" + (" (set)" if s.floor[1] == "set" else "")] if s.floor else []
        if s.tokens or s.cost_usd:
            rest.append(f" │ {s.tokens / 1000:.1f}k tok ${s.cost_usd:.2f}")
        if s.focus:
            rest.append(f" │ focus {s.focus}")
        baseline = f" │ baseline {fmt.us(s.baseline_us)} µs"
        # The baseline is the one field the speedup already implies: where the line would not fit
        # (80 columns), it goes, so the noise floor, the cost and the focus stay whole.
        width = self.size.width
        if not width or len(line2.plain) + len(baseline) + sum(map(len, rest)) <= width:
            line2.append(baseline)
        for part in rest:
            line2.append(part)
        text = Text("\n").join([line1, line2])
        if text.plain != self._shown:         # the clock ticks once a second; nothing else needs a repaint
            self._shown = text.plain
            self.update(text)
