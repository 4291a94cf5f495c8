"""wy_blocked's column step exists twice: as C++ source for jiterator (the GPU) and as torch ops
(the CPU, and every CPU test). The GPU copy cannot run here, so its source is compiled on the host
with a C++ compiler and fed, element by element, what jiterator would feed it for real panels;
the torch copy must give the same values on every branch (rows above the diagonal, a column that
is zero from the diagonal down, column j itself, the other columns).
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CXX = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")

MAIN = r"""
#include <math.h>
#include <stdio.h>
%s
int main() {
  double a[8];
  while (scanf("%%lf %%lf %%lf %%lf %%lf %%lf %%lf %%lf", a, a + 1, a + 2, a + 3, a + 4, a + 5, a + 6, a + 7) == 8)
    printf("%%.17g\n", wy_step<double>(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]));
  return 0;
}
"""


def _module():
    spec = importlib.util.spec_from_file_location("wyb_step", ROOT / "kernels/qr/candidates/wy_blocked.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _panels(mod):
    """(step arguments, j) for transposed panels (B, C, M) as _columns passes them: random scales
    from 1e-30 to 1e30, matrices whose column j is zero from the diagonal down (a dead step),
    alpha = 0 with a live tail, an exact reflection (tail zero, alpha nonzero)."""
    g = torch.Generator().manual_seed(7)
    out = []
    for b, c, m, j in ((6, 5, 9, 0), (6, 4, 12, 3), (5, 1, 7, 2), (4, 6, 6, 5)):
        scale = 10.0 ** torch.randint(-30, 31, (b, 1, 1), generator=g).double()
        p = torch.randn(b, c, m, generator=g, dtype=torch.float64) * scale
        p[1, 0, j:] = 0.0                    # dead: z0 = 0
        p[2, 0, j:] *= 1e-150                # dead: z0 below 1e-280
        p[3, 0, j] = 0.0                     # alpha = 0, the tail alive
        if j + 1 < m:
            p[4, 0, j + 1:] = 0.0            # tail zero: a live reflection of alpha alone
        z = torch.bmm(p[:, :, j:], p[:, 0, j:].unsqueeze(2))
        f, _, _ = mod._masks(m, c, "cpu")
        out.append(((p, p[:, :1], z, p[:, :, j:j + 1], p[:, :1, j:j + 1], z[:, :1], f[:, :c, :m]), j))
    return out


@pytest.mark.skipif(CXX is None, reason="no C++ compiler to build the jiterator source on the host")
def test_the_gpu_step_source_computes_what_the_cpu_step_does(tmp_path):
    mod = _module()
    exe, src = tmp_path / "step", tmp_path / "step.cpp"
    src.write_text(MAIN % mod._STEP)
    build = subprocess.run([CXX, "-O1", "-ffp-contract=off", "-o", str(exe), str(src)], capture_output=True,
                           text=True)
    assert build.returncode == 0, build.stderr
    branches = {"above": 0, "dead": 0, "column j": 0, "others": 0}
    for args, j in _panels(mod):
        p = args[0]
        expanded = [t.expand(p.shape).reshape(-1) for t in args] + [torch.full((p.numel(),), float(j))]
        rows = torch.stack(expanded, dim=1).tolist()
        text = "\n".join(" ".join(repr(v) for v in row) for row in rows)
        run = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
        host = torch.tensor([float(v) for v in run.stdout.split()], dtype=torch.float64).view(p.shape)
        torch_step = mod._step_torch(*args, j)
        assert torch.isfinite(host).all() and torch.isfinite(torch_step).all()
        close = torch.isclose(host, torch_step, rtol=1e-13, atol=0.0)
        assert close.all(), (j, (~close).nonzero()[:5].tolist(), host[~close][:5], torch_step[~close][:5])
        live = (args[5] > 1e-280).expand(p.shape)
        r = torch.arange(p.shape[2]).view(1, 1, -1).expand(p.shape)
        first = torch.zeros_like(p, dtype=torch.bool)
        first[:, 0] = True
        branches["above"] += int((r < j).sum())
        branches["dead"] += int(((r >= j) & ~live).sum())
        branches["column j"] += int(((r >= j) & live & first).sum())
        branches["others"] += int(((r >= j) & live & ~first).sum())
    assert min(branches.values()) >= 10, branches
