"""Time cholqr's panel kernels one launch at a time on the GPU (CUDA events, median of 20).

    python3 scripts/cholqr_probe.py [--warps 1,2,4]

For a few (batch, n, k0) panels it runs the whole fused panel once (so the scratch holds real
values), then times each kernel of the row-split path alone with one program per matrix (the
Gram passes, the first Cholesky, the second Cholesky with the reconstruction, the lower rows), the
Householder fallback with every matrix accepted (its early exit) and with none (its full cost), and
the fused panel. Prints one line per (shape, warps). A look at where a panel's time goes, not a
benchmark.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def load():
    spec = importlib.util.spec_from_file_location("cholqr_probe_mod", ROOT / "kernels/qr/candidates/cholqr.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1000.0)
    return statistics.median(out)


def probe(mod, b, n, k0, warps):
    torch.manual_seed(0)
    a = torch.randn(b, n, n, device="cuda")
    cfg = dict(mod.CONFIG, chol_warps=warps)
    ws = mod._Work(a, cfg)
    NB, bk = ws.NB, int(cfg["bk"])
    nb, m = min(NB, n - k0), n - k0
    tau = torch.zeros(b, n, device="cuda")
    rel, thr = float(cfg["rel"]), float(cfg["thr"])
    a0 = a.clone()

    def fused():
        mod._panel_kernel[(b,)](a, tau, ws.tw, ws.g, ws.m1, ws.mf, ws.ok, n, k0, nb, n * n, rel, thr,
                                NB=NB, NBT=NB, BK=bk, num_warps=warps)

    a.copy_(a0)
    fused()
    ok = int(ws.ok.sum().item())
    a.copy_(a0)
    res = {"accepted": f"{ok}/{b}"}
    res["gram1"] = timed(lambda: mod._gram_kernel[(b, 1)](a, ws.g, ws.m1, n, k0, nb, m, n * n, NB=NB, BK=bk,
                                                           SECOND=False, num_warps=warps))
    res["first"] = timed(lambda: mod._first_kernel[(b,)](ws.g, ws.m1, ws.ok, nb, rel, NB=NB, num_warps=warps))
    res["gram2"] = timed(lambda: mod._gram_kernel[(b, 1)](a, ws.g, ws.m1, n, k0, nb, m, n * n, NB=NB, BK=bk,
                                                           SECOND=True, num_warps=warps))
    a.copy_(a0)  # the top block is rewritten by each launch; its values stay O(1), which is all timing needs
    res["second"] = timed(lambda: mod._second_kernel[(b,)](a, tau, ws.tw, ws.g, ws.m1, ws.mf, ws.ok, n, k0,
                                                            nb, n * n, rel, thr, NB=NB, NBT=NB, num_warps=warps))
    ws.ok.fill_(1)
    res["lower"] = timed(lambda: mod._lower_kernel[(b, 1)](a, ws.mf, ws.ok, n, k0, nb, max(1, m - nb), n * n, NB=NB,
                                                            BK=bk, num_warps=warps))
    res["hh_exit"] = timed(lambda: mod._householder_kernel[(b,)](a, tau, ws.tw, ws.ok, ws.cnt, n, k0, nb, n * n,
                                                                  NB=NB, NBT=NB, BK=bk, num_warps=warps))
    ws.ok.zero_()
    res["hh_all"] = timed(lambda: mod._householder_kernel[(b,)](a, tau, ws.tw, ws.ok, ws.cnt, n, k0, nb, n * n,
                                                                 NB=NB, NBT=NB, BK=bk, num_warps=warps), reps=5)
    a.copy_(a0)
    res["fused"] = timed(fused)
    torch.cuda.synchronize()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warps", default="1,2,4")
    ap.add_argument("--shapes", default="1x32@0,40x176@0,640x512@0,640x512@448,60x1024@512")
    args = ap.parse_args()
    mod = load()
    for shape in args.shapes.split(","):
        bn, k0 = shape.split("@")
        b, n = map(int, bn.split("x"))
        for w in map(int, args.warps.split(",")):
            r = probe(mod, b, n, int(k0), w)
            print(f"{shape:<14} warps={w} " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                                                  for k, v in r.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
