"""Text formatting shared by the panels, the digest and the report: µs, speedups, durations, times."""
from __future__ import annotations

import time

VERDICT_MARK = {"accepted": "✓", "rejected": "·", "failed": "✗", "running": "…", "unfinished": "✗"}


def us(value: float | None) -> str:
    """A geomean in µs with about four significant digits: 812.4, 15,227, 1.04e6."""
    if value is None:
        return "—"
    if value >= 1e7:
        return f"{value:.3g}"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def compact(v: float) -> str:
    """820, 9.8k, 98k, 1.2M: axis labels at most four characters wide."""
    if v >= 1e6:
        return f"{v / 1e6:.2g}M"
    if v >= 1e3:
        return f"{v / 1e3:.2g}k" if v < 1e4 else f"{v / 1e3:.0f}k"
    return f"{v:.3g}"


def speedup(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def duration(seconds: float) -> str:
    """3d04h, 5h07m, 12m03s, 42s."""
    s = int(max(0, seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def clock(ts: float) -> str:
    """Local wall-clock time of an event (HH:MM:SS)."""
    return time.strftime("%H:%M:%S", time.localtime(ts)) if ts else "--:--:--"


def date_time(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "?"


def short(text: str, width: int) -> str:
    """One line, cut to `width` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: max(0, width - 1)] + "…"


def target(value: str | None) -> str:
    return value or "all"
