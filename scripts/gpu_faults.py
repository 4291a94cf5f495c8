"""GPU fault scenarios (issue 6): each broken candidate, then a good one on the same GPU.

Illegal memory access, a kernel that never ends, out of memory, unjoined side work, a
replaced CUDA event. After each, the GPU is probed in a fresh process and a good candidate
must pass: a fault never leaks into the next evaluation.

Usage (GPU machine): PYTHONPATH=$PWD python3 scripts/gpu_faults.py [--json OUT]
"""
import argparse
import json
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_smoke import small_task  # noqa: E402

from agent.harness.runner import EvalOptions, check_gpu, evaluate  # noqa: E402

GOOD = "import torch\ndef custom_kernel(data):\n    return torch.geqrf(data)\n"
TRITON = "import torch\nimport triton\nimport triton.language as tl\n"
SCENARIOS = {
    "illegal memory access": TRITON + '''
@triton.jit
def _poke(p):
    tl.store(p + 1_000_000_000_000, 1.0)

def custom_kernel(data):
    _poke[(1,)](data)
    return torch.geqrf(data)
''',
    "kernel that never ends": TRITON + '''
@triton.jit
def _spin(p):
    # volatile: a plain load is hoisted and the loop compiled away (seen on the H200)
    x = tl.load(p, volatile=True)
    while x == 0:
        x = tl.load(p, volatile=True)

def custom_kernel(data):
    _spin[(1,)](torch.zeros(1, device=data.device))
    return torch.geqrf(data)
''',
    "out of memory": '''
import torch
def custom_kernel(data):
    hog = torch.empty(1 << 40, dtype=torch.uint8, device=data.device)
    return torch.geqrf(data)
''',
    "unjoined side work": '''
import torch
side = torch.cuda.Stream()
def custom_kernel(data):
    with torch.cuda.stream(side):
        out = torch.geqrf(data)
        for _ in range(20):
            torch.cuda._sleep(2_000_000)
    return out
''',
    "replaced cuda event": '''
import torch
class FastEvent(torch.cuda.Event):
    def elapsed_time(self, other):
        return 1e-6
torch.cuda.Event = FastEvent
def custom_kernel(data):
    return torch.geqrf(data)
''',
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--only", action="append", default=None, help="run only these scenarios (repeatable)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        task = small_task(d)
        good = Path(d) / "good.py"
        good.write_text(GOOD)
        for name, src in SCENARIOS.items():
            if args.only and name not in args.only:
                continue
            path = Path(d) / (name.replace(" ", "_") + ".py")
            path.write_text(textwrap.dedent(src))
            t0 = time.monotonic()
            r = evaluate(path, task, EvalOptions(mode="quick", device="cuda", stage_timeout=args.timeout))
            wall = time.monotonic() - t0
            healthy, probe = check_gpu(timeout=60)
            nxt = evaluate(good, task, EvalOptions(mode="quick", device="cuda", stage_timeout=args.timeout))
            rows.append({"scenario": name, "ok": r.ok, "error_class": r.error_class, "stage": r.stage,
                         "flags": r.flags, "message": r.message[:200], "wall_s": round(wall, 2),
                         "gpu_healthy_after": healthy, "probe": probe[:80], "next_candidate_ok": nxt.ok})
    print(f"{'scenario':24} {'verdict':>10} {'stage':>6} {'wall s':>7} {'healthy':>8} {'next ok':>8}  message")
    for r in rows:
        verdict = "PASSED" if r["ok"] else r["error_class"]
        print(f"{r['scenario']:24} {verdict:>10} {str(r['stage']):>6} {r['wall_s']:7.2f} "
              f"{str(r['gpu_healthy_after']):>8} {str(r['next_candidate_ok']):>8}  {r['message'][:90]}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    cheats = [r for r in rows if r["ok"]]
    return 1 if cheats or not all(r["next_candidate_ok"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
