"""What one register panel launch costs on a GPU, by tile shape, warps and column-loop variant.

    python3 scripts/panel_probe.py [--family wy_triton] [--shapes 2x4096x8,8x2048x16,...] \
        [--warps 4,8,16,32] [--late-max 16384,1048576]

A shape BxMxNB is B matrices of M x M, and the panel the family's _panel_kernel factors at k0 = 0:
M rows, NB columns in a register tile (BM = M rows, a power of two). Each variant is timed as the
median of 20 launches between CUDA events, each on a fresh copy of the same input (the copy is
outside the events), and printed as µs a launch and µs a column. --late-max sets the module's
_LATE_MAX (tiles of at most that many floats set each column's final values after the loop), so
one call can compare the two column loops at the same tile size. Every launch's panel is checked
against torch.linalg.qr's R (|R| agrees to 1e-3 relative) once per variant.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "kernels" / "qr"), str(ROOT / "scripts")]
import reference  # noqa: E402
from qr_families import load_candidate  # noqa: E402


def launch(mod, a, tau, tw, nb, warps):
    b, n, _ = a.shape
    mod._panel_kernel[(b,)](a, tau, tw, tau, n, 0, nb, n * n, 0, BM=n, NB=nb, NBT=tw.shape[-1], WRITE_T=True,
                            WRITE_V=False, num_warps=warps)


def panel_ok(a0, out, nb):
    """|diag R| of the first nb columns against torch's (signs are a convention)."""
    r = torch.linalg.qr(a0[:, :, :nb].double())[1].diagonal(dim1=1, dim2=2).abs()
    got = out[:, :nb, :nb].diagonal(dim1=1, dim2=2).double().abs()
    return bool(((r - got).abs() <= 1e-3 * r.abs().amax(dim=1, keepdim=True)).all())


def time_variant(mod, a0, nb, warps, reps=20):
    b, n, _ = a0.shape
    tau = torch.empty(b, n, device=a0.device)
    tw = torch.zeros(b, max(16, nb), max(16, nb), device=a0.device)
    a = a0.clone()
    launch(mod, a, tau, tw, nb, warps)  # compile
    torch.cuda.synchronize()
    ok = panel_ok(a0, a, nb)
    times = []
    for _ in range(reps):
        a.copy_(a0)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        launch(mod, a, tau, tw, nb, warps)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(times), min(times), ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="wy_triton")
    ap.add_argument("--shapes", default="2x4096x8,2x2048x16,8x2048x16,2x1024x32,60x1024x32,640x512x32")
    ap.add_argument("--warps", default="4,8,16,32")
    ap.add_argument("--late-max", default="16384,1048576")
    args = ap.parse_args()
    import triton.language as tl

    path = ROOT / "kernels" / "qr" / "candidates" / f"{args.family}.py"
    print(f"{args.family}  torch {torch.__version__}  {torch.cuda.get_device_name()}")
    print(f"{'shape':<14}{'late_max':>9}{'warps':>6}{'us/launch':>11}{'min':>9}{'us/col':>8}  ok")
    for late in (int(x) for x in args.late_max.split(",")):
        mod = load_candidate(path, f"{args.family}_late{late}")
        mod._LATE_MAX = tl.constexpr(late)
        for shape in args.shapes.split(","):
            b, m, nb = (int(x) for x in shape.split("x"))
            a0 = reference.generate_input(b, m, 1, 77)
            for warps in (int(x) for x in args.warps.split(",")):
                try:
                    med, lo, ok = time_variant(mod, a0, nb, warps)
                except Exception as exc:  # noqa: BLE001 - e.g. out of resources at 32 warps
                    print(f"{shape:<14}{late:>9}{warps:>6}  ERROR {type(exc).__name__}: {str(exc)[:120]}")
                    continue
                print(f"{shape:<14}{late:>9}{warps:>6}{med:>11.1f}{lo:>9.1f}{med / nb:>8.2f}  {ok}", flush=True)
            del a0
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
