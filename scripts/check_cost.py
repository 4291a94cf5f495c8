"""How long the qr checker takes per benchmark case, and how Q formation compares (householder_product vs WY).

Usage: python scripts/check_cost.py [--cases N]   (on a GPU machine; CPU works with the cpu cases)
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "qr"))
import reference  # noqa: E402
from agent.harness.task import load_task  # noqa: E402


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, reps=2):
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t) / reps


def wy_q(h, tau):
    """Q = I - V T V^T in float64, batched; tau == 0 columns are made harmless (v = 0, tau = 1)."""
    n = h.shape[-1]
    v = torch.tril(h, -1) + torch.eye(n, dtype=h.dtype, device=h.device)
    zero = tau == 0
    v = v * (~zero).unsqueeze(-2)
    t_inv = torch.triu(v.transpose(-1, -2) @ v, 1) + torch.diag_embed(torch.where(zero, 1.0, 1.0 / tau))
    eye = torch.eye(n, dtype=h.dtype, device=h.device).expand_as(t_inv)
    t = torch.linalg.solve_triangular(t_inv, eye, upper=True)
    return eye - v @ t @ v.transpose(-1, -2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=12)
    args = ap.parse_args()
    task = load_task("qr")
    tests, benches = task.cases(on_gpu=torch.cuda.is_available())
    print(f"{'case':28} {'gen ms':>8} {'geqrf ms':>9} {'check ms':>9} {'hh_prod ms':>10} {'wy ms':>8} {'max|dQ|':>9}")
    for spec in benches[: args.cases]:
        a = reference.generate_input(**spec)
        gen = timed(lambda: reference.generate_input(**spec), 1)
        h, tau = torch.geqrf(a)
        geq = timed(lambda: torch.geqrf(a), 1)
        chk = timed(lambda: reference.check_implementation(a, (h, tau)), 2)
        h64, t64 = h.double(), tau.double()
        hh = timed(lambda: torch.linalg.householder_product(h64, t64), 2)
        wy = timed(lambda: wy_q(h64, t64), 2)
        diff = float((torch.linalg.householder_product(h64, t64) - wy_q(h64, t64)).abs().max())
        label = f"{spec['case']} {spec['batch']}x{spec['n']}"
        print(f"{label:28} {gen*1e3:8.2f} {geq*1e3:9.2f} {chk*1e3:9.2f} {hh*1e3:10.2f} {wy*1e3:8.2f} {diff:9.2e}",
              flush=True)


if __name__ == "__main__":
    main()
