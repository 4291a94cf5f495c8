"""`steer report NAME -o FILE.png`: a picture of the run to share, and a markdown summary next to it.

The same fold as the console (ConsoleModel), drawn with matplotlib's Agg backend: per branch the
best-so-far step line and the attempt dots (failed ones as ✗ along the top), the baseline, and
each steering prompt as a dotted vertical line at the iteration that first used it.
"""
from __future__ import annotations

from pathlib import Path

from agent.session import Session
from console import fmt
from console.backlog import load_backlog
from console.model import ConsoleModel

COLORS = ("tab:cyan", "tab:purple", "tab:green", "tab:orange", "tab:blue", "tab:red", "tab:olive", "tab:gray")


def load_model(session: Session) -> ConsoleModel:
    model = ConsoleModel()
    load_backlog(session.events_path, model)
    return model


def write_report(session: Session, png: Path) -> tuple[Path, Path]:
    model = load_model(session)
    model.state.name = model.state.name or session.name     # a session whose agent never started
    png = png if png.suffix else png.with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    draw(model, png)
    md = png.with_suffix(".md")
    md.write_text(summary(model, png.name))
    return png, md


def draw(model: ConsoleModel, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    s = model.state
    fig, ax = plt.subplots(figsize=(12, 6.5), dpi=120)
    try:
        ys = [y for b in model.series.values() for y in b.us] + [g.us for b in model.series.values() for g in b.gains]
        if s.baseline_us:
            ys.append(s.baseline_us)
        top = max(ys) * 1.15 if ys else 1.0
        for k, name in enumerate(s.branches):
            b = model.series.get(name)
            if b is None:
                continue
            color = COLORS[k % len(COLORS)]
            if b.it:
                ax.scatter(b.it, b.us, s=9, color=color, alpha=0.45, linewidths=0)
            if b.fail_it:
                ax.scatter(b.fail_it, [top] * len(b.fail_it), s=16, marker="x", color=color, alpha=0.8)
            if b.gains:
                xs = [g.iteration for g in b.gains] + [max(s.iteration, b.gains[-1].iteration)]
                us = [g.us for g in b.gains] + [b.gains[-1].us]
                ax.step(xs, us, where="post", color=color, linewidth=2, label=f"{name} ({fmt.us(us[-1])} µs)")
        if s.baseline_us:
            ax.axhline(s.baseline_us, color="black", linestyle="--", linewidth=1,
                       label=f"baseline {fmt.us(s.baseline_us)} µs")
        for m in model.marks:
            ax.axvline(m.iteration, color="goldenrod", linestyle=":", linewidth=1)
            ax.annotate(fmt.short(m.text, 40), (m.iteration, 1.0), xycoords=("data", "axes fraction"),
                        rotation=90, va="top", ha="right", fontsize=7, color="darkgoldenrod")
        if ys:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt.compact(v)))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: fmt.compact(v)))
        ax.set_xlabel("iteration (✗ along the top: failed attempts; dotted: steering)")
        ax.set_ylabel("geomean µs (log)")
        best = f"best {fmt.us(s.best_us)} µs, {fmt.speedup(s.best_speedup)} over the baseline" if s.best_us else ""
        ax.set_title(f"{s.name or '?'} · task {s.task or '?'} · {s.proposer or '?'} · {s.iteration} iterations"
                     + (f" · {best}" if best else ""), fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper right")
        fig.tight_layout()
        fig.savefig(png)
    finally:
        plt.close(fig)


def summary(model: ConsoleModel, image: str) -> str:
    s = model.state
    best = s.best
    lines = [
        f"# Steer session {s.name or '?'}",
        "",
        f"- task **{s.task or '?'}**, proposer {s.proposer or '?'}" + (f" ({s.model})" if s.model else "")
        + f", {s.device_name or s.device or '?'}",
        f"- {fmt.date_time(s.started_ts)} for {fmt.duration(s.elapsed_s())}: {s.iteration} iterations, "
        f"{s.evaluations} evaluations" + (f", {s.tokens} tokens, ${s.cost_usd:.2f}" if s.tokens else ""),
        f"- baseline {fmt.us(s.baseline_us)} µs; best {fmt.us(s.best_us)} µs ({fmt.speedup(s.best_speedup)})"
        + (f" on {best.branch} in #{best.iteration} ({best.sha[:10]}): {best.summary}" if best else ""),
        f"- agent: {'running' if s.running else 'stopped' + (f' ({s.stop_reason})' if s.stop_reason else '')}",
        "",
        f"![timing]({image})",
        "",
        "| branch | family | state | best µs | speedup | attempts | accepted | since gain |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for b in s.branches.values():
        sp = s.baseline_us / b.best_us if s.baseline_us and b.best_us else None
        lines.append(f"| {b.name} | {b.family} | {b.state}{' (plateau)' if b.plateau else ''} | {fmt.us(b.best_us)} "
                     f"| {fmt.speedup(sp)} | {b.attempts} | {b.accepted} | {b.since_gain} |")
    rows = model.steering_rows(limit=1000)
    if rows:
        lines += ["", "## Steering", ""]
        for r in reversed(rows):
            lines.append(f"- `{r.text}` → {fmt.target(r.target)}, {r.scope}: {r.detail}")
    if s.errors:
        lines += ["", f"## Errors ({len(s.errors)})", ""]
        lines += [f"- {fmt.date_time(e.ts)} {e.where}: {fmt.short(e.message, 160)}" for e in s.errors[-10:]]
    return "\n".join(lines) + "\n"
