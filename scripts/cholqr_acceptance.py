"""How cholqr's acceptance test splits panels between CholeskyQR2 and the Householder fallback.

    python3 scripts/cholqr_acceptance.py [--n 48] [--batch 4]
    TRITON_INTERPRET=1 python3 scripts/cholqr_acceptance.py     # the Triton kernels, on the CPU

Inputs: matrices whose odd columns are the even ones plus noise of a given size (1e-4 .. 1e-7),
so every panel's condition number is about 1 / that size. For each, cholqr runs with its
acceptance test as configured (`thr`, `rel`), with either part switched off (`thr` 1; `rel` 0,
which still needs a positive pivot), and with both off (then only a non-positive pivot, a failed
Cholesky or a non-finite result falls back). Prints, per run, the panels that
fell back, the checker's verdict and the tolerance used (reference.check_margin).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

QR = Path(__file__).resolve().parents[1] / "kernels" / "qr"


def load_cholqr():
    spec = importlib.util.spec_from_file_location("cholqr_acceptance", QR / "candidates" / "cholqr.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    import torch

    sys.path.insert(0, str(QR))
    import reference

    defaults = load_cholqr().CONFIG
    runs = [("as configured", {}), ("thr off", {"thr": 1.0}), ("rel off", {"rel": 0.0}),
            ("both off", {"thr": 1.0, "rel": 0.0})]
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    print(f"cholqr, {'Triton kernels (interpreter)' if interpreted else 'PyTorch path'}, {args.batch}x{args.n}, "
          f"thr={defaults['thr']:g}, rel={defaults['rel']:g}")
    g = torch.Generator().manual_seed(3)
    for apart in (1e-4, 1e-5, 1e-6, 1e-7):
        a = torch.randn(args.batch, args.n, args.n, generator=g)
        a[:, :, 1::2] = a[:, :, 0:args.n - 1:2] + apart * torch.randn(args.batch, args.n, args.n // 2, generator=g)
        cells = []
        for name, change in runs:
            mod = load_cholqr()
            mod.CONFIG.update(change)
            ok, _, margin = reference.check_margin(a, mod.custom_kernel(a.clone()))
            fell = mod.fallbacks("cpu") if interpreted else mod.STATS["fallback"]
            panels = args.batch * -(-args.n // mod._width(mod.CONFIG, args.n))
            cells.append(f"{name}: {fell}/{panels} fell back, {'pass' if ok else 'FAIL'} {100 * margin:.2f}%")
        print(f"pairs {apart:g} apart | " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
