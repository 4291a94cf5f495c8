"""wy_blocked's column step exists twice: as C++ source for jiterator (the GPU) and as eager torch
ops (the CPU, and every CPU test). The GPU copy cannot run here, so its source is compiled on the
host with a C++ compiler and fed the same inputs as the eager copy; the two must agree on every
branch (rows above the diagonal, a zero column, column j itself, the other columns).
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


def _inputs(mod, count=4000):
    """Columns of p, x, z, prow, alpha, z0, f, j (float64) covering every branch of the step."""
    g = torch.Generator().manual_seed(7)
    u = lambda: torch.randn(count, generator=g, dtype=torch.float64)  # noqa: E731
    j = torch.randint(0, 6, (count,), generator=g).double()
    r = torch.randint(0, 8, (count,), generator=g).double()
    first = torch.rand(count, generator=g) < 0.4
    alpha = u() * 10.0 ** torch.randint(-30, 30, (count,), generator=g).double()
    alpha[::17] = 0.0
    z0 = alpha * alpha + u().abs() * 10.0 ** torch.randint(-60, 60, (count,), generator=g).double()
    z0[::11] = 0.0  # a zero column: reflected by e_j
    z0[5::23] = 1e-290
    f = r + mod._FIRST * first.double()
    return torch.stack([u(), u(), u() * 3, u(), alpha, z0, f, j], dim=1)


@pytest.mark.skipif(CXX is None, reason="no C++ compiler to build the jiterator source on the host")
def test_the_gpu_step_source_computes_what_the_cpu_step_does(tmp_path):
    mod = _module()
    exe = tmp_path / "step"
    src = tmp_path / "step.cpp"
    src.write_text(MAIN % mod._STEP)
    build = subprocess.run([CXX, "-O1", "-ffp-contract=off", "-o", str(exe), str(src)], capture_output=True,
                           text=True)
    assert build.returncode == 0, build.stderr
    cols = _inputs(mod)
    text = "\n".join(" ".join(repr(v) for v in row) for row in cols.tolist())
    run = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
    host = torch.tensor([float(v) for v in run.stdout.split()], dtype=torch.float64)
    eager = mod._step_eager(*cols.unbind(1))
    assert host.shape == eager.shape == (len(cols),)
    assert torch.isfinite(host).all() and torch.isfinite(eager).all()
    close = torch.isclose(host, eager, rtol=1e-13, atol=0.0)
    bad = (~close).nonzero().flatten()[:5].tolist()
    assert close.all(), [(cols[i].tolist(), host[i].item(), eager[i].item()) for i in bad]
    # every branch was exercised
    first = cols[:, 6] >= mod._FIRST
    r = torch.where(first, cols[:, 6] - mod._FIRST, cols[:, 6])
    live = cols[:, 5] > 1e-280
    for name, mask in {"above": r < cols[:, 7], "dead": (r >= cols[:, 7]) & ~live,
                       "column j": first & live & (r >= cols[:, 7]), "others": ~first & live & (r > cols[:, 7])}.items():
        assert mask.sum() > 50, name
