"""Check and time the qr candidate families in one go (meant for one call on the GPU machine).

    python3 scripts/qr_families.py [--families wy_blocked,wy_triton,...] [--time] [--out DIR]

Each family runs in its own subprocess (a CUDA fault in one cannot poison the others) and is
checked with kernels/qr/reference.py's per-matrix checker on: the 22 tests, the 12 benchmarks,
the special matrices (`special_inputs`) and dense cond-8 matrices at sizes n = 1..4096. With
--time, each benchmark is timed the GPU MODE way in miniature (fresh clone per call, L2 flushed,
CUDA events; a few repeats), which is a quick look, not the official `steer bench` number.
Each passing check records how much of the checker's tolerance it used (reference.check_margin).
The last lines printed are a short table; JSON details go to --out.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QR = ROOT / "kernels" / "qr"
FAMILIES = ("wy_blocked", "wy_triton", "cholqr", "superpanel")
# torch.geqrf on the H200, µs (BENCHMARKS.md, harness section): only for a quick ratio here.
GEQRF_US = (280.9, 15227, 39969, 995764, 228182, 71748, 45809, 994651, 227926, 981951, 995716, 228183)
SIZES_GPU = (1, 2, 3, 5, 8, 16, 17, 31, 33, 64, 65, 100, 127, 129, 200, 257, 300, 513, 1000, 1025, 2049, 4095)


def special_inputs(device, sizes=(1, 5, 40, 300), conditioned=True):
    """(name, tensor) pairs: the special matrices of issue 5 at the given sizes, and with
    `conditioned` the ill-conditioned ones of conditioned_inputs."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(1234)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device)

    out = []
    for n in sizes:
        out.append((f"zero n={n}", torch.zeros(2, n, n, device=device)))
        out.append((f"identity n={n}", torch.eye(n, device=device).repeat(2, 1, 1)))
        out.append((f"minus-identity n={n}", -torch.eye(n, device=device).repeat(1, 1, 1)))
        out.append((f"upper n={n}", torch.triu(randn(2, n, n))))
        dup = randn(2, n, n)
        dup[:, :, n // 2:] = dup[:, :, :1]
        out.append((f"duplicate-columns n={n}", dup))
        out.append((f"all-columns-equal n={n}", randn(2, n, 1).repeat(1, 1, n)))
        out.append((f"tiny-1e-30 n={n}", randn(2, n, n) * 1e-30))
        out.append((f"huge-1e30 n={n}", randn(2, n, n) * 1e30))
        scales = torch.tensor([1e-30, 1.0, 1e30], device=device).view(3, 1, 1)
        out.append((f"batch-of-1e-30/1/1e30 n={n}", randn(3, n, n) * scales))
        out.append((f"non-contiguous n={n}", randn(2, n, n).transpose(1, 2)))
        # contiguous, but 4 bytes past an aligned address (Triton specializes on 16-byte alignment)
        out.append((f"misaligned-view n={n}", randn(2 * n * n + 1)[1:].view(2, n, n)))
        out.append((f"batch-1 n={n}", randn(1, n, n)))
        first_zero = randn(2, n, n)
        first_zero[:, :, 0] = 0
        out.append((f"zero-first-column n={n}", first_zero))
        out.append((f"rank-1 n={n}", randn(2, n, 1) @ randn(2, 1, n)))
        tiny_entries = randn(2, n, n)
        tiny_entries[:, n // 2:, :] *= 1e-30
        out.append((f"rows-near-1e-30 n={n}", tiny_entries))
    return out + (conditioned_inputs(device, sizes) if conditioned else [])


def conditioned_inputs(device, sizes):
    """(name, tensor) pairs beyond the suite's cond <= 8: singular values spread from 1 to 1e-6, 1e-8
    (float64 CholeskyQR2's limit) and 1e-12 (past float32's precision); columns graded from 1e-30 to
    1e30; Kahan's matrix (R's diagonal decays, no column looks small); column pairs 1e-6 apart
    (panels of cond ~1e6: cholqr's acceptance band)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(4321)
    out = []
    for n in sizes:
        for cond in (1e6, 1e8, 1e12):
            u, _ = torch.linalg.qr(torch.randn(2, n, n, generator=g, dtype=torch.float64))
            v, _ = torch.linalg.qr(torch.randn(2, n, n, generator=g, dtype=torch.float64))
            s = torch.logspace(0, -math.log10(cond), n, dtype=torch.float64)
            out.append((f"cond-{cond:g} n={n}", ((u * s) @ v.transpose(1, 2)).float().to(device)))
        graded = torch.randn(2, n, n, generator=g) * torch.logspace(-30, 30, n)
        out.append((f"columns-graded-1e-30..1e30 n={n}", graded.to(device)))
        i = torch.arange(n, dtype=torch.float64)
        upper = torch.triu(torch.full((n, n), -math.cos(1.2), dtype=torch.float64), 1) + torch.eye(n, dtype=torch.float64)
        out.append((f"kahan n={n}", (math.sin(1.2) ** i[:, None] * upper).float().repeat(2, 1, 1).to(device)))
        pairs = torch.randn(2, n, n, generator=g)
        pairs[:, :, 1::2] = pairs[:, :, 0:n - 1:2] + 1e-6 * torch.randn(2, n, n // 2, generator=g)
        out.append((f"column-pairs-1e-6-apart n={n}", pairs.to(device)))
    return out


def load_candidate(path: Path, name: str | None = None):
    spec = importlib.util.spec_from_file_location(name or f"cand_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def time_calls(mod, copies, flush, tag: int) -> float:
    """µs per call of mod.custom_kernel over `copies`, as the harness times a repeat: L2 flushed
    (`flush` refilled with `tag`), then all the calls between two CUDA events."""
    import torch

    flush.fill_(tag)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for c in copies:
        mod.custom_kernel(c)
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3 / len(copies)


# ----------------------------------------------------------------------------------- child
def run_one(path: Path, do_time: bool, sizes: tuple[int, ...], out_json: Path, overrides: dict | None = None,
            checks: bool = True, profile: bool = False, special_sizes: tuple[int, ...] = (1, 5, 40, 300)) -> None:
    import torch
    import yaml

    sys.path.insert(0, str(QR))
    import reference as ref

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    doc = yaml.safe_load((QR / "task.yml").read_text())
    mod = load_candidate(path)
    config = getattr(mod, "CONFIG", {})  # the baseline (geqrf.py) has none
    config.update(overrides or {})
    rec = {"family": path.stem, "config": dict(config), "checks": [], "bench": []}

    def check(label, a, kind):
        t0 = time.perf_counter()
        try:
            out = mod.custom_kernel(a.clone())
            if dev.type == "cuda":
                torch.cuda.synchronize()
            ok, msg, margin = ref.check_margin(a, out)
        except Exception as exc:  # noqa: BLE001 - report and go on
            ok, msg, margin = False, f"{type(exc).__name__}: {exc}"[:400], None
        rec["checks"].append({"kind": kind, "case": label, "ok": bool(ok), "msg": msg,
                              "first_call_s": round(time.perf_counter() - t0, 3)})
        if ok and margin is not None:
            rec["checks"][-1]["margin"] = margin
        if not ok:
            print(f"  FAIL {path.stem} {kind} {label}: {msg}", flush=True)

    on_gpu = dev.type == "cuda"
    suites = {"tests": doc["tests"], "benchmarks": doc["benchmarks"]} if on_gpu else \
        {"tests": doc["steer"]["cpu_tests"], "benchmarks": doc["steer"]["cpu_benchmarks"]}
    for kind, specs in suites.items():
        for spec in (specs if checks or kind == "benchmarks" else []):
            label = f"{spec['case']} {spec['batch']}x{spec['n']} c{spec['cond']}"
            check(label, ref.generate_input(**spec), kind)
    for label, a in special_inputs(dev, special_sizes) if checks else []:
        check(label, a, "special")
    for n in sizes if checks else []:
        check(f"dense c8 {2 if n < 2048 else 1}x{n}", ref.generate_input(2 if n < 2048 else 1, n, 8, 900 + n), "size")
    if hasattr(mod, "STATS"):
        rec["stats"] = dict(mod.STATS)
    if hasattr(mod, "fallbacks"):  # cholqr's Triton path counts on the device (its STATS stay 0 there)
        rec.setdefault("stats", {})["fallback_kernel_panels"] = mod.fallbacks(dev)

    if do_time and dev.type == "cuda":
        # As the harness does: k = clamp(256 MiB / input bytes, 1, 50) calls between two events,
        # L2 flushed before each repeat, fresh clones for every call.
        flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device=dev)
        for spec in doc["benchmarks"]:
            base = ref.generate_input(**spec)
            k = max(1, min(50, (256 << 20) // (base.numel() * 4)))
            mod.custom_kernel(base.clone())
            times, spent = [], 0.0
            while len(times) < 3 or (spent < 0.4 and len(times) < 20):
                copies = [base.clone() for _ in range(k)]
                us = time_calls(mod, copies, flush, len(times))
                times.append(us)
                spent += us * k / 1e6
                del copies
            times.sort()
            rec["bench"].append({"case": f"{spec['case']} {spec['batch']}x{spec['n']}",
                                 "median_us": times[len(times) // 2], "min_us": times[0], "reps": len(times), "k": k})
            del base
            torch.cuda.empty_cache()
    if profile and dev.type == "cuda":
        from torch.profiler import ProfilerActivity, profile as tprofile
        rec["profile"] = {}
        for spec in [b for b in doc["benchmarks"] if b["case"] == "dense"]:
            a = ref.generate_input(**spec)
            mod.custom_kernel(a.clone())
            torch.cuda.synchronize()
            with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
                mod.custom_kernel(a.clone())
                torch.cuda.synchronize()
            rows = []
            for ev in prof.key_averages():
                dt = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
                if dt > 0:
                    rows.append((dt, ev.count, ev.key[:60]))
            rows.sort(reverse=True)
            rec["profile"][f"{spec['batch']}x{spec['n']}"] = [{"us": round(r[0], 1), "count": r[1], "name": r[2]}
                                                             for r in rows[:6]]
    out_json.write_text(json.dumps(rec, indent=1))


# ----------------------------------------------------------------------------------- parent
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/qr_families"))
    ap.add_argument("--timeout", type=float, default=400.0, help="seconds per family")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES_GPU)))
    ap.add_argument("--special-sizes", default="1,5,40,300", help="n of the special matrices")
    ap.add_argument("--check-variants", action="store_true", help="run every check on the variants too")
    ap.add_argument("--set", default="", help=argparse.SUPPRESS)
    ap.add_argument("--no-checks", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help="torch.profiler's top kernels on the dense cases")
    ap.add_argument("--variants", default="",
                    help="';'-separated FAMILY:key=value,key=value runs, timed only (checked on the benchmarks)")
    args = ap.parse_args()
    sizes = tuple(int(s) for s in args.sizes.split(",") if s)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.one:
        overrides = {}
        for kv in filter(None, args.set.split(",")):
            key, val = kv.split("=")
            try:
                overrides[key] = json.loads(val)
            except json.JSONDecodeError:  # a bare word: a string knob (prec=ieee, trail=gemm)
                overrides[key] = val
        tag = args.set.replace("=", "-").replace(",", "_").replace(".", "p")
        run_one(Path(args.one), args.time, sizes, out / f"{Path(args.one).stem}{'_' + tag if tag else ''}.json",
                overrides, checks=not args.no_checks, profile=args.profile,
                special_sizes=tuple(int(x) for x in args.special_sizes.split(",") if x))
        return 0

    runs = [(fam, "") for fam in filter(None, args.families.split(","))]
    runs += [tuple(v.split(":", 1)) if ":" in v else (v, "") for v in filter(None, args.variants.split(";"))]
    recs = []
    for fam, sets in runs:
        path = QR / "candidates" / f"{fam}.py"
        cmd = [sys.executable, __file__, "--one", str(path), "--out", str(out), "--sizes", args.sizes,
               "--special-sizes", args.special_sizes]
        cmd += ["--time"] if args.time else []
        cmd += ["--profile"] if args.profile else []
        cmd += (["--set", sets] + ([] if args.check_variants else ["--no-checks"])) if sets else []
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=args.timeout, capture_output=True, text=True)
            err = proc.stderr[-3000:] if proc.returncode else ""
            sys.stdout.write(proc.stdout)
        except subprocess.TimeoutExpired as exc:
            err = f"timeout after {args.timeout} s; partial stdout: {(exc.stdout or b'')[-1500:]!r}"
        if err:
            (out / f"{fam}.log").write_text(err)
        tag = sets.replace("=", "-").replace(",", "_").replace(".", "p")
        path_json = out / f"{fam}{'_' + tag if tag else ''}.json"
        rec = json.loads(path_json.read_text()) if path_json.exists() and not err else {"family": fam, "error": err}
        rec["label"] = f"{fam}{' ' + sets if sets else ''}"
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        recs.append(rec)
        if err:
            print(f"{fam}: ERROR {err[-1500:]}", flush=True)

    print("\nrun           checks  failed  wall_s  " + ("geomean_us  x(geqrf recorded)" if args.time else ""))
    for rec in recs:
        checks = rec.get("checks", [])
        failed = [c for c in checks if not c["ok"]]
        line = f"{rec['label']:<13} {len(checks):>6}  {len(failed):>6}  {rec['wall_s']:>6}"
        bench = rec.get("bench", [])
        if bench and len(bench) == len(GEQRF_US):
            gm = math.exp(sum(math.log(b["median_us"]) for b in bench) / len(bench))
            base = math.exp(sum(math.log(x) for x in GEQRF_US) / len(GEQRF_US))
            line += f"  {gm:>10.1f}  {base / gm:>6.1f}x"
        print(line + (f"  stats={rec['stats']}" if rec.get("stats") else ""))
    for rec in recs:
        measured = [c for c in rec.get("checks", []) if "margin" in c]
        if measured:
            worst = max(measured, key=lambda c: c["margin"])
            print(f"margin {rec['label']}: the worst check used {100 * worst['margin']:.2f}% of the checker's "
                  f"tolerance ({worst['kind']} {worst['case']})")
    for rec in recs:
        for case, rows in rec.get("profile", {}).items():
            print(f"profile {rec['label']} {case}: " + "; ".join(f"{r['name'][:38]} {r['us']:.0f}us x{r['count']}"
                                                               for r in rows[:4]))
    if any(r.get("bench") for r in recs):
        names = [b["case"] for b in next(r for r in recs if r.get("bench"))["bench"]]
        print("\ncase".ljust(22) + "".join(f"{'v' + str(i):>9}" for i in range(len(recs))) + "  geqrf(rec)")
        for i, name in enumerate(names):
            cells = "".join(f"{r['bench'][i]['median_us']:>9.0f}" if len(r.get("bench", [])) > i else f"{'-':>9}"
                            for r in recs)
            print(f"{name:<21}{cells}  {GEQRF_US[i]:>9}")
        print("  ".join(f"v{i}={r['label']}" for i, r in enumerate(recs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
