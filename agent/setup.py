"""Session setup, before the first iteration: measure the baseline, then create and measure one branch per seed.

Idempotent, so a session that died during setup resumes it: what the events already record is
skipped, and a seed branch whose ref exists in git (a crash before its event) is reused.
All speedups are against the baseline measured here, in the same run.
"""
from __future__ import annotations

import json
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent import events as ev
from agent.beam import branch_name, geomean_se
from agent.harness.result import EvalResult
from agent.harness.runner import evaluate
from agent.vcs import AttemptRecord, CaseLine, VcsError

if TYPE_CHECKING:
    from agent.loop import Agent


class Setup:
    def __init__(self, agent: "Agent"):
        self.agent = agent
        self.dir = agent.session.artifacts / "setup"

    def _evaluate(self, path: Path, label: str, abort: threading.Event, slot: int | None) -> EvalResult:
        a = self.agent

        def progress(msg: dict[str, Any]) -> None:
            if msg.get("type") == "stage":
                a.emit(ev.EvalProgress(iteration=0, branch=label, stage=str(msg.get("stage")), detail="setup"))
            elif msg.get("type") == "case" and msg.get("kind") == "benchmark":
                a.emit(ev.EvalProgress(iteration=0, branch=label, stage="bench",
                                       detail=f"benchmark {int(msg.get('index', 0)) + 1}/{msg.get('total')}"))

        result = evaluate(path, a.task, a.eval_options(slot), on_progress=progress, cancel=abort)
        self.dir.mkdir(mode=0o700, exist_ok=True)
        a.write_artifact(self.dir / f"{label.replace('/', '_')}.json",
                         json.dumps(result.to_json(), indent=1, default=str))
        return result

    def _evaluate_all(self, jobs: list[tuple[str, Path]], abort: threading.Event) -> dict[str, EvalResult]:
        """Evaluate setup jobs, one per evaluation slot at a time (two GPUs halve the setup)."""
        slots = queue.Queue()
        for slot in self.agent.slots:
            slots.put(slot)

        def one(job: tuple[str, Path]) -> EvalResult:
            slot = slots.get()
            try:
                return self._evaluate(job[1], job[0], abort, slot)
            finally:
                slots.put(slot)
        with ThreadPoolExecutor(max_workers=max(1, len(self.agent.slots))) as pool:
            return dict(zip((label for label, _ in jobs), pool.map(one, jobs)))

    def run(self, prior: list[ev.Event], stop: threading.Event, abort: threading.Event) -> bool:
        """False when stopped or aborted before setup finished (a resume continues it)."""
        a = self.agent
        task = a.task
        jobs: list[tuple[str, Path]] = []
        if task.baseline is not None and not any(isinstance(e, ev.BaselineMeasured) for e in prior):
            jobs.append(("baseline", task.baseline))
        seeds = [(branch_name(task.name, seed.stem), seed) for seed in task.seed_candidates()[: a.cfg.beam]]
        jobs += [(name, seed) for name, seed in seeds if name not in a.state.branches]
        if stop.is_set() or abort.is_set():
            return False
        results = self._evaluate_all(jobs, abort) if jobs else {}
        if abort.is_set():
            return False  # cancelled evaluations measured nothing; a resume redoes them
        if "baseline" in results:
            r = results["baseline"]
            a.emit(ev.BaselineMeasured(geomean_us=r.geomean_us if r.ok else None, ok=r.ok,
                                       message=r.message if not r.ok else "",
                                       cases=[{"spec": c.spec, "mean_us": c.mean_us, "stderr_us": c.stderr_us}
                                              for c in r.benchmarks]))
        for name, seed in seeds:
            if abort.is_set():
                return False
            if name in results:
                self._seed(seed, name, results[name])
        return not abort.is_set()

    def _seed(self, path: Path, name: str, r: EvalResult) -> None:
        a = self.agent
        assert a.repo is not None
        code = path.read_text()
        se = geomean_se(r.to_json().get("cases", [])) if r.ok else None
        base = a.state.baseline_us
        speedup = base / r.geomean_us if r.ok and base and r.geomean_us else None
        sha = a.repo.head(name)
        try:
            if sha is None or a.repo.read(sha) != code:
                record = AttemptRecord(summary=f"seed {path.stem}: {path.name} from the task's candidates",
                                       iteration=0, branch=name, verdict="seed", ok=r.ok,
                                       error="" if r.ok else f"{r.error_class}: {r.message}",
                                       reason="the branch's starting point", geomean_us=r.geomean_us if r.ok else None,
                                       geomean_se_us=se, speedup=speedup, baseline_us=base,
                                       cases=[CaseLine(" ".join(f"{k}={v}" for k, v in c.spec.items() if k != "seed"),
                                                       c.mean_us, c.stderr_us) for c in r.benchmarks])
                sha = a.repo.commit(code, record.message(), a.repo.root())
                a.repo.create_branch(name, sha)
        except VcsError as exc:
            a.emit(ev.ErrorEvent(where="setup", message=f"cannot create branch {name}: {exc}"))
            return
        a.emit(ev.BranchCreated(branch=name, family=path.stem, sha=sha, source=f"seed {path.name}",
                                geomean_us=r.geomean_us if r.ok else None, geomean_se_us=se))
        if not r.ok:
            a.emit(ev.ErrorEvent(where="setup", message=f"seed {path.name} failed its evaluation "
                                                      f"({r.error_class}: {r.message}); the branch starts unmeasured"))
        if a.state.branches and len(a.state.branches) == 1:
            a.repo.show(name)
