"""One-call GPU smoke test of the harness: a Triton candidate compiles and passes inside the sandbox.

Usage (GPU machine): PYTHONPATH=$PWD python3 scripts/gpu_smoke.py
"""
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import yaml

from agent.harness.runner import EvalOptions, evaluate
from agent.harness.task import load_task

ROOT = Path(__file__).resolve().parents[1]

TRITON_CANDIDATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 1.0, mask=mask)


def custom_kernel(data):
    h, tau = torch.geqrf(data)
    out = torch.empty_like(tau)
    _scale[(triton.cdiv(tau.numel(), 256),)](tau, out, tau.numel(), BLOCK=256)
    return h, out
'''


def small_task(d: str, tests: int = 2, benchmarks: int = 1):
    """The qr task cut to its first few cases, in directory d."""
    task_dir = Path(d) / "qr_small"
    shutil.copytree(ROOT / "kernels" / "qr", task_dir)
    doc = yaml.safe_load((task_dir / "task.yml").read_text())
    doc["tests"] = doc["tests"][:tests]
    doc["benchmarks"] = doc["benchmarks"][:benchmarks]
    (task_dir / "task.yml").write_text(yaml.safe_dump(doc))
    return load_task(task_dir)


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        task = small_task(d)
        cand = Path(d) / "triton_cand.py"
        cand.write_text(textwrap.dedent(TRITON_CANDIDATE))
        r = evaluate(cand, task, EvalOptions(mode="quick"))
        print("ok", r.ok, r.error_class, r.message[:500])
        print("sandbox:", r.sandbox, "| device:", r.device, "| stages:", r.stage_s, "| wall", round(r.wall_s, 2))
        if not r.ok:
            print(r.stderr_tail[-3000:])
        return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
