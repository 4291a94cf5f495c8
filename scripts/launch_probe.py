"""Where a small-n call's time goes, on a GPU: host time, kernel time, and the harness's reading.

    python3 scripts/launch_probe.py [--batch 20 --n 32] [--families superpanel,wy_triton]

For each family and small-path variant (small_nb; each call through Triton's launch, or the
cached compiled kernel) it prints three numbers, µs per call:
- host: the issue rate of custom_kernel on one input, the fewest µs a call over 20 runs of 100
  calls with no synchronization inside (then, for small_nb=0, the same for its pieces);
- gpu: 50 factorizations replayed from one CUDA graph, so no host time is in it;
- harness: as GPU MODE times it, 50 fresh clones between two events after an L2 flush; the
  median over 30 repeats, and the spread (min..max).
The call is host-bound when host > gpu; then the harness reads about host.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "kernels" / "qr"), str(ROOT / "scripts")]
import reference  # noqa: E402
from qr_families import load_candidate, time_calls  # noqa: E402


def host_us(fn, calls=100, batches=20):
    """Fewest µs a call over `batches` runs of `calls` calls (below the GPU's queue depth, so the
    host is never held back by the GPU; the minimum drops the host's own jitter)."""
    fn()
    best = float("inf")
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - t0)
    torch.cuda.synchronize()
    return best / calls * 1e6


def breakdown(mod, x):
    """Host µs of the pieces of one small call (superpanel or wy_triton internals)."""
    b, n = x.shape[0], x.shape[-1]
    tau = torch.empty(b, n, device=x.device)
    kernel, grid, args, warps = mod._small_launch(x, tau, dict(mod.CONFIG))
    compiled = kernel[grid](*args, num_warps=warps)
    runner = compiled[(grid[0], 1, 1)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel[grid](*args, num_warps=warps)
    rows = [("torch.empty", lambda: torch.empty(b, n, device=x.device)),
            ("Triton launch", lambda: kernel[grid](*args, num_warps=warps)),
            ("compiled runner", lambda: runner(*args)),
            ("graph.replay (1 kernel)", graph.replay),
            ("custom_kernel", lambda: mod.custom_kernel(x))]
    for label, fn in rows:
        print(f"  host {label:<26}{host_us(fn):>8.2f} us", flush=True)


def gpu_us(mod, inputs):
    cfg = dict(mod.CONFIG)
    work = [x.clone() for x in inputs]
    taus = [torch.empty(x.shape[0], x.shape[1], device=x.device) for x in inputs]
    for a, t in zip(work, taus):  # compile outside the capture
        mod._factor_small(a, t, cfg)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for a, t in zip(work, taus):
            mod._factor_small(a, t, cfg)
    graph.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        graph.replay()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3 / (10 * len(inputs))


def harness_us(mod, inputs, repeats=30):
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    times = [time_calls(mod, [x.clone() for x in inputs], flush, r) for r in range(repeats)]
    return statistics.median(times), min(times), max(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--families", default="superpanel,wy_triton")
    ap.add_argument("--small-nb", default="0,8,16,32")
    args = ap.parse_args()
    inputs = [reference.generate_input(args.batch, args.n, 1, 5000 + i) for i in range(50)]
    x = inputs[0].clone()
    print(f"{args.batch}x{args.n}  torch {torch.__version__}  {torch.cuda.get_device_name()}")
    empty_us = host_us(lambda: torch.empty(args.batch, args.n, device="cuda"))
    print(f"host torch.empty({args.batch},{args.n}): {empty_us:.2f} us")
    print(f"{'variant':<34}{'host':>8}{'gpu':>8}{'harness':>9}  spread")
    for fam in filter(None, args.families.split(",")):
        for nb in (int(s) for s in args.small_nb.split(",")):
            for fast in (True, False):
                mod = load_candidate(ROOT / "kernels" / "qr" / "candidates" / f"{fam}.py", f"{fam}_{nb}_{fast}")
                mod.CONFIG["small_nb"] = nb
                if not fast:
                    class Ordinary(mod._Small):
                        def __call__(self, a):
                            tau = torch.empty(a.shape[0], a.shape[1], device=a.device)
                            mod._factor_small(a, tau, self.cfg)
                            return a, tau
                    mod._Small = Ordinary
                ok, msg = reference.check_implementation(inputs[1], mod.custom_kernel(inputs[1].clone()))
                if not ok:
                    print(f"{fam} small_nb={nb}: FAILED {msg}")
                    continue
                h = host_us(lambda: mod.custom_kernel(x))
                g = gpu_us(mod, inputs)
                med, lo, hi = harness_us(mod, inputs)
                label = f"{fam} small_nb={nb} {'cached' if fast else 'triton'}"
                print(f"{label:<34}{h:>8.2f}{g:>8.2f}{med:>9.2f}  {lo:.2f}..{hi:.2f}", flush=True)
                if fast and nb == 0:
                    breakdown(mod, x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
