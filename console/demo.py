"""A deterministic, made-up session: for the console's tests, snapshots, tmux capture and benchmark.

Nothing here runs an agent; it writes the events an agent would write (three branches,
accepted/rejected/failed attempts, steering that is used and rejected, a plateau, an error).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import zlib
from pathlib import Path

from agent import events as ev
from agent.session import EventLog, Session, create_session

T0 = 1_764_000_000.0     # a fixed start (2025-11-24 16:00 UTC): renders are the same every run
BRANCHES = (("qr/geqrf-blocked", "geqrf-blocked", 121_500.0), ("qr/cholqr", "cholqr", 98_400.0),
            ("qr/wy-triton", "wy-triton", 109_800.0))
BASELINE_US = 116_818.0
SPECS = [{"kind": k, "batch": b, "n": n} for k, b, n in (
    ("dense", 20, 32), ("dense", 40, 176), ("dense", 40, 352), ("dense", 640, 512), ("dense", 60, 1024),
    ("dense", 8, 2048), ("dense", 2, 4096), ("mixed", 640, 512), ("mixed", 60, 1024), ("rankdef", 640, 512),
    ("clustered", 640, 512), ("nearrank", 60, 1024))]
KNOBS = ("block", "num_warps", "panel", "unroll", "split_k", "stages")


def demo_events(attempts: int = 40, seed: int = 7, stopped: bool = True, results: bool = False,
                step_s: float = 95.0) -> list[ev.Event]:
    """The events of a run with `attempts` iterations, with fixed timestamps (seq is left 0)."""
    rng = random.Random(seed)
    out: list[ev.Event] = []
    t = T0

    def add(e: ev.Event, dt: float = 1.0) -> None:
        nonlocal t
        t += dt
        e.ts = t
        out.append(e)

    add(ev.SessionStarted(name="demo", task="qr", task_path="kernels/qr", proposer="tune", device="cuda",
                          device_name="NVIDIA H200", gpus=[0], version="0.1.0"))
    add(ev.BaselineMeasured(geomean_us=BASELINE_US, cases=[{"spec": s, "mean_us": 1000.0} for s in SPECS]), 40)
    best: dict[str, float] = {}
    floor: dict[str, float] = {}       # gains shrink as a branch nears it: long runs plateau
    since: dict[str, int] = {}
    for name, family, us in BRANCHES:
        add(ev.BranchCreated(branch=name, family=family, sha=f"{zlib.crc32(name.encode()):08x}0000",
                             source=f"kernels/qr/candidates/{family}.py", geomean_us=us), 20)
        best[name], since[name], floor[name] = us, 0, us * 0.45
    add(ev.NoiseMeasured(floor=0.016, samples=[{"branch": name, "first_us": us, "again_us": us * 1.016, "gap": 0.016}
                                               for name, _, us in BRANCHES]), 0)
    names = [b[0] for b in BRANCHES]
    steer_at = {max(2, attempts // 3): ("s0000001", "try a larger panel width on cholqr", "qr/cholqr", "once"),
                max(3, attempts // 2): ("s0000002", "prefer num_warps 8", None, "standing")}
    for i in range(1, attempts + 1):
        branch = names[i % 3] if i % 7 else names[1]
        parent = f"{(i * 7919) % 16**12:012x}"
        add(ev.IterationStarted(iteration=i, branch=branch, parent_sha=parent), step_s * rng.uniform(0.6, 1.4))
        if i in steer_at:
            sid, text, target, scope = steer_at[i]
            add(ev.SteeringReceived(id=sid, text=text, target=target, scope=scope), 0.1)
        knob = KNOBS[rng.randrange(len(KNOBS))]
        summary = f"{knob} {rng.choice((16, 32, 64, 128))} -> {rng.choice((16, 32, 64, 128, 256))}"
        add(ev.ProposalMade(iteration=i, branch=branch, proposer="tune", ok=True, summary=summary,
                            steering_ids=[steer_at[i][0]] if i in steer_at else []), 2)
        for stage, detail in (("import", ""), ("smoke", ""), ("tests", "")) + tuple(
                ("bench", f"benchmark {k}/{len(SPECS)}") for k in range(1, len(SPECS) + 1, 3)) + (("bench", "done"),):
            add(ev.EvalProgress(iteration=i, branch=branch, stage=stage, detail=detail), 3)
        failed = rng.random() < 0.12
        gap = best[branch] - floor[branch]
        us = None if failed else floor[branch] + gap * rng.uniform(0.88, 1.12)
        result: dict = {}
        if results:     # shaped like the harness JSON the agent puts in eval_finished (~5 KB)
            result = {"ok": not failed, "error_class": "wrong" if failed else None, "message": "",
                      "stage": "bench", "mode": "quick", "device": "cuda", "task": "qr",
                      "candidate": f"artifacts/{i}/candidate.py", "geomean_us": us,
                      "cases": [{"kind": "test", "spec": {**sp, "seed": 100 + k}, "passed": True, "message": "",
                                 "mean_us": None, "std_us": None, "stderr_us": None, "best_us": None,
                                 "worst_us": None, "runs": 0, "per_call_inputs": 1, "profile": None}
                                for k, sp in enumerate(SPECS[:10])]
                      + [{"kind": "benchmark", "spec": sp, "passed": not failed, "message": "",
                          "mean_us": None if us is None else us * rng.uniform(0.2, 4.0), "std_us": 1.0,
                          "stderr_us": 0.1, "best_us": None if us is None else us * 0.2, "worst_us": None,
                          "runs": 5, "per_call_inputs": 1, "profile": None} for sp in SPECS],
                      "stderr_tail": "" if not failed else "RuntimeError: mismatch at [3, 17]\n" * 20,
                      "stdout_tail": "", "flags": [], "versions": {"torch": "2.11.0", "triton": "3.6.0"},
                      "wall_s": 31.2, "timed_s": 12.5, "stage_s": {"import": 1.1, "tests": 8.0, "bench": 22.1},
                      "exit_code": 0, "sandbox": "landlock", "overhead_s": 18.7}
        add(ev.EvalFinished(iteration=i, branch=branch, ok=not failed, error_class="wrong" if failed else None,
                            message="output mismatch in case 4" if failed else "ok", geomean_us=us,
                            speedup=BASELINE_US / us if us else None, result=result), 30)
        if failed:
            verdict, reason = "failed", "wrong: output mismatch in case 4"
        elif us is not None and us < best[branch] * 0.995:
            verdict, reason = "accepted", ""
            best[branch] = us
        else:
            verdict, reason = "rejected", "not faster than the head"
        since[branch] = 0 if verdict == "accepted" else since[branch] + 1
        add(ev.AttemptCommitted(iteration=i, branch=branch, sha=f"{(i * 104729) % 16**12:012x}", parent_sha=parent,
                                verdict=verdict, summary=summary, geomean_us=us,
                                speedup=BASELINE_US / us if us else None, reason=reason,
                                ref=branch if verdict == "accepted" else f"refs/attempts/{i}"), 1)
        if i in steer_at:
            add(ev.SteeringApplied(id=steer_at[i][0], iteration=i, branch=branch), 0.1)
        if since[branch] == 5:
            add(ev.PlateauDetected(branch=branch, attempts_since_gain=5, minutes_since_gain=5 * step_s / 60 * 3,
                                   best_us=best[branch]), 0.1)
        if i == max(4, attempts * 3 // 4):
            add(ev.SteeringReceived(id="s0000003", text="/pause qr/nope", kind="command"), 0.1)
            add(ev.SteeringRejected(id="s0000003", reason="unknown branch qr/nope"), 0.1)
            add(ev.ErrorEvent(where="harness", message="worker restarted after a CUDA error (illegal address)",
                              iteration=i), 0.1)
    if stopped:
        add(ev.AgentStopped(reason="budget", iterations=attempts, detail="iterations budget reached"), 2)
    return out


def demo_config() -> dict:
    return {"task": "qr", "proposer": "tune", "device": "cuda", "beam": 3}


def write_events(session: Session, events: list[ev.Event]) -> None:
    """Bulk-write events (numbering them) without an fsync per line: for generated sessions only."""
    first = 1
    if session.events_path.exists() and session.events_path.stat().st_size:
        with open(session.events_path, "rb") as f:
            first = sum(1 for _ in f) + 1
    lines = []
    for k, e in enumerate(events):
        e.seq = first + k
        lines.append(json.dumps(e.to_json(), default=str, ensure_ascii=False))
    with open(session.events_path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def write_demo(root: Path, name: str = "demo", attempts: int = 40, **kw: object) -> Session:
    session = create_session(root, name, demo_config())
    write_events(session, demo_events(attempts, **kw))  # type: ignore[arg-type]
    return session


def append_live(session: Session, events: list[ev.Event]) -> list[ev.Event]:
    """Append the way the agent does (fsynced, numbered after the last line)."""
    log = EventLog(session.events_path)
    try:
        return [log.append(e) for e in events]
    finally:
        log.close()


def git_two_commits(repo: Path) -> tuple[str, str]:
    """A repository with a seed candidate and one attempt on top; returns (parent, child) shas."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "steer", "GIT_AUTHOR_EMAIL": "steer@localhost",
           "GIT_COMMITTER_NAME": "steer", "GIT_COMMITTER_EMAIL": "steer@localhost",
           "GIT_AUTHOR_DATE": "2025-11-24T16:00:00Z", "GIT_COMMITTER_DATE": "2025-11-24T16:00:00Z"}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    repo.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "qr/cholqr")
    (repo / "submission.py").write_text("CONFIG = {'panel': 32, 'num_warps': 4}\n\n\ndef custom_kernel(data):\n"
                                        "    return cholqr(data, **CONFIG)\n")
    git("add", "submission.py")
    git("commit", "-q", "-m", "seed: cholqr")
    parent = git("rev-parse", "HEAD")
    (repo / "submission.py").write_text("CONFIG = {'panel': 64, 'num_warps': 8}\n\n\ndef custom_kernel(data):\n"
                                        "    return cholqr(data, **CONFIG)\n")
    git("commit", "-q", "-am", "panel 32 -> 64, num_warps 4 -> 8")
    return parent, git("rev-parse", "HEAD")


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m console.demo", description=__doc__)
    p.add_argument("root", type=Path)
    p.add_argument("name", nargs="?", default="demo")
    p.add_argument("--attempts", type=int, default=40)
    p.add_argument("--results", action="store_true", help="include per-case harness results in eval_finished")
    p.add_argument("--running", action="store_true", help="end without agent_stopped")
    args = p.parse_args(argv)
    write_demo(args.root, args.name, args.attempts, results=args.results, stopped=not args.running)
    print(args.root / args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
