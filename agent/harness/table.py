"""Plain-text tables of evaluation results, for `steer eval` and `steer bench`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.harness.result import CaseResult, EvalResult, margin_text


def fmt_us(us: float | None) -> str:
    if us is None:
        return "-"
    if us >= 100_000:
        return f"{us:,.0f}"
    if us >= 100:
        return f"{us:,.1f}"
    return f"{us:.2f}"


def case_label(spec: dict[str, Any]) -> str:
    if "n" in spec and "batch" in spec:
        label = f"{spec.get('case', 'dense')} {spec['batch']}x{spec['n']}"
        return label + (f" c{spec['cond']}" if "cond" in spec else "")
    return " ".join(f"{k}={v}" for k, v in spec.items() if k != "seed")


def _grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def format_eval(r: EvalResult) -> str:
    head = f"{Path(r.candidate).name} on {r.task} [{r.mode}, {r.device}]"
    lines = [head]
    if not r.ok:
        lines.append(f"FAILED ({r.error_class}) in stage {r.stage}: {r.message}")
        if r.stderr_tail.strip():
            lines.append("stderr (tail):")
            lines.extend("  " + l for l in r.stderr_tail.strip().splitlines()[-15:])
    bench = r.benchmarks
    if bench:
        rows = [[case_label(c.spec), fmt_us(c.mean_us), fmt_us(c.std_us), fmt_us(c.best_us), fmt_us(c.worst_us),
                 str(c.runs)] for c in bench]
        lines.append(_grid(["benchmark", "mean us", "std", "best", "worst", "runs"], rows))
    profiled = [c for c in bench if c.profile]
    if profiled:
        rows = [[case_label(c.spec), f"{c.profile.get('launches_per_call', 0):.1f}",
                 f"{100 * (c.profile.get('busy_share') or 0):.0f}%",
                 ", ".join(t["name"][:40] for t in c.profile.get("top", [])[:2])] for c in profiled]
        lines.append(_grid(["profile", "launches/call", "busy", "top kernels"], rows))
    tests = [c for c in r.cases if c.kind == "test"]
    if r.ok:
        lines.append(f"tests passed: {len(tests)}; geomean {fmt_us(r.geomean_us)} us")
    worst = r.worst_margin
    if r.ok and worst:
        lines.append(f"accuracy: {margin_text(worst.margin)} of the checker's tolerance at most "
                     f"({worst.kind} {case_label(worst.spec)})")
    if r.flags:
        lines.append(f"flags: {', '.join(r.flags)} (GPU MODE rejects a submission containing 'stream')")
    lines.append(f"wall {r.wall_s:.2f} s, timed {r.timed_s:.3f} s, overhead {r.overhead_s:.2f} s")
    return "\n".join(lines)


def _speedup(base: float | None, mine: float | None) -> str:
    if not base or not mine:
        return ""
    return f" ({base / mine:.1f}x)"


def format_bench(baseline: EvalResult, others: list[EvalResult]) -> str:
    results = [baseline] + others
    header = ["benchmark"] + [Path(r.candidate).stem for r in results]
    specs: list[dict[str, Any]] = []
    for r in results:
        for c in r.benchmarks:
            if c.spec not in specs:
                specs.append(c.spec)
    base_by = {_key(c): c for c in baseline.benchmarks}
    rows = []
    for spec in specs:
        row = [case_label(spec)]
        for r in results:
            mine = next((c for c in r.benchmarks if c.spec == spec), None)
            base = base_by.get(_key(CaseResult(kind="benchmark", spec=spec, passed=True)))
            cell = fmt_us(mine.mean_us) if mine else "-"
            if r is not baseline and mine and base:
                cell += _speedup(base.mean_us, mine.mean_us)
            row.append(cell)
        rows.append(row)
    geo = ["geomean"]
    for r in results:
        cell = fmt_us(r.geomean_us) if r.ok else f"FAIL:{r.error_class}"
        if r is not baseline and r.ok:
            cell += _speedup(baseline.geomean_us, r.geomean_us)
        geo.append(cell)
    if any(r.worst_margin for r in results):  # the task measures it (check_margin)
        rows.append(["tolerance used"] + [margin_text(r.worst_margin.margin) if r.ok and r.worst_margin else "-"
                                          for r in results])
    rows.append(geo)
    lines = [_grid(header, rows)]
    for r in results:
        if not r.ok:
            lines.append(f"{Path(r.candidate).name}: FAILED ({r.error_class}) in {r.stage}: {r.message}")
    return "\n".join(lines)


def _key(c: CaseResult) -> str:
    return repr(sorted(c.spec.items()))
