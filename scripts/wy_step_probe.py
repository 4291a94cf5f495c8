"""Time wy_blocked's column step and its parts, one launch at a time, on the GPU (device call g3).

    python3 scripts/wy_step_probe.py

For a few panel shapes (B matrices, C columns left, M rows), each variant is captured 50 times in
one CUDA graph and replayed; the printed figure is the replay's time over 50, in microseconds.
(Call g3 ran it at commit 05c9039, whose step took the row and column indices as two tensors;
the step now takes them as one, f.)
Variants: the candidate's _STEP kernel (one sqrt and one division an element) on the strided view
the loop passes it and on a contiguous copy; an FMA-only step with the per-matrix scalars (beta,
s) precomputed (timed only: its values are not the step's), and the jiterator kernel that
precomputes them; a plain torch.add of the same size;
and the batched GEMV that gives z.
"""
import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("wyb", ROOT / "kernels/qr/candidates/wy_blocked.py")
wyb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wyb)

_FMA = """
template <typename T> T wy_fma(T p, T x, T z, T prow, T beta, T s, T r, T c, T j) {
  if (r < j) return p;
  if (c == T(0)) return r == j ? beta : x * beta * s;
  return r == j ? z * s : p + (z - beta * prow) * x * s;
}
"""
_SCAL = """
template <typename T> void wy_scal(T alpha, T z0, T& beta, T& s) {
  beta = -copysign(sqrt(z0), alpha);
  s = T(1) / (alpha * beta - z0);
}
"""


def per_launch(fn, reps=50):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        g.replay()
        t1.record()
        torch.cuda.synchronize()
        best = min(best, t0.elapsed_time(t1) * 1000 / reps)
    return best


def main():
    fma = torch.cuda.jiterator._create_jit_fn(_FMA, j=0.0)
    scal = torch.cuda.jiterator._create_multi_output_jit_fn(_SCAL, num_outputs=2)
    print(f"{'B x C x M':<18}" + "".join(f"{h:>11}" for h in ("step", "step-contig", "fma", "scalars",
                                                               "fma+scal", "add", "gemv")))
    for b, c, m in ((20, 16, 32), (40, 32, 176), (60, 16, 512), (640, 8, 256), (8, 16, 2048), (2, 32, 4096)):
        full = torch.randn(b, c + 1, m, dtype=torch.float64, device="cuda")
        pr = full[:, 1:]  # strided, as the loop's pr = out[:, 1:]
        prc = pr.contiguous()
        j = 3
        f, _, _ = wyb._masks(m, c, "cuda")
        idx = torch.arange(max(m, c), dtype=torch.float64, device="cuda").view(1, 1, -1)
        r, cc = idx[:, :, :m], idx[:, :, :c].transpose(1, 2)
        z = torch.bmm(pr[:, :, j:], pr[:, 0, j:].unsqueeze(2))
        beta, s = scal(pr[:, :1, j:j + 1], z[:, :1])

        def args(p):
            return (p, p[:, :1], z, p[:, :, j:j + 1], p[:, :1, j:j + 1], z[:, :1], f)

        row = {
            "step": lambda: wyb._step_jit(*args(pr), j),
            "step-contig": lambda: wyb._step_jit(*args(prc), j),
            "fma": lambda: fma(pr, pr[:, :1], z, pr[:, :, j:j + 1], beta, s, r, cc, j=float(j)),
            "scalars": lambda: scal(pr[:, :1, j:j + 1], z[:, :1]),
            "fma+scal": lambda: (scal(pr[:, :1, j:j + 1], z[:, :1]),
                                 fma(pr, pr[:, :1], z, pr[:, :, j:j + 1], beta, s, r, cc, j=float(j))),
            "add": lambda: torch.add(prc, 1.0),
            "gemv": lambda: torch.bmm(pr[:, :, j:], pr[:, 0, j:].unsqueeze(2)),
        }
        print(f"{f'{b} x {c} x {m}':<18}" + "".join(f"{per_launch(fn):>11.2f}" for fn in row.values()), flush=True)


if __name__ == "__main__":
    main()
