"""Harness overhead per candidate (wall time beyond the timed kernel work) and time to reject a broken one.

Targets (DESIGN.md): overhead <= 5 s per candidate; a broken candidate rejected in <= 5 s.
The GPU probe runs once before timing starts, as it does in a running agent.

Usage: python scripts/bench_harness.py [--mode quick] [--json OUT] [CANDIDATE ...]
"""
import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from agent.harness.runner import EvalOptions, cuda_available, evaluate
from agent.harness.task import load_task

BROKEN = {
    "syntax error": "def custom_kernel(data)\n    return data\n",
    "raises at first call": "def custom_kernel(data):\n    raise RuntimeError('broken')\n",
    "import error": "import no_such_module_xyz\n",
    "wrong output": "import torch\ndef custom_kernel(data):\n    return torch.zeros_like(data), "
                    "torch.zeros(data.shape[:2], device=data.device)\n",
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("candidates", nargs="*")
    ap.add_argument("--mode", default="quick")
    ap.add_argument("--json", default=None)
    ap.add_argument("--prestart", action="store_true",
                    help="as the agent loop runs: a pre-started worker; report each candidate's second evaluation")
    args = ap.parse_args()
    task = load_task("qr")
    t0 = time.monotonic()
    gpu = cuda_available()
    probe_s = time.monotonic() - t0
    files = [Path(c) for c in args.candidates] or [task.baseline]
    rows = []
    for f in files:
        opts = EvalOptions(mode=args.mode, prestart=args.prestart)
        r = evaluate(f, task, opts)
        if args.prestart:
            r = evaluate(f, task, opts)
        rows.append({"candidate": f.name, "ok": r.ok, "error": r.error_class, "wall_s": round(r.wall_s, 3),
                     "timed_s": round(r.timed_s, 3), "overhead_s": round(r.overhead_s, 3), "stage_s": r.stage_s,
                     "geomean_us": r.geomean_us})
    with tempfile.TemporaryDirectory() as d:
        for name, src in BROKEN.items():
            p = Path(d) / (name.replace(" ", "_") + ".py")
            p.write_text(src)
            r = evaluate(p, task, EvalOptions(mode=args.mode, prestart=args.prestart))
            rows.append({"candidate": f"broken: {name}", "ok": r.ok, "error": r.error_class,
                         "wall_s": round(r.wall_s, 3), "timed_s": 0.0, "overhead_s": round(r.wall_s, 3),
                         "stage_s": r.stage_s, "geomean_us": None})
    print(f"machine: {platform.node()} gpu={gpu} python {platform.python_version()} (GPU probe {probe_s:.2f} s, once)")
    print(f"{'candidate':34} {'ok':>5} {'error':>9} {'wall s':>8} {'timed s':>8} {'overhead s':>10}  stages")
    for r in rows:
        stages = " ".join(f"{k}={v:.2f}" for k, v in r["stage_s"].items())
        print(f"{r['candidate']:34} {str(r['ok']):>5} {str(r['error']):>9} {r['wall_s']:8.2f} {r['timed_s']:8.3f} "
              f"{r['overhead_s']:10.2f}  {stages}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
