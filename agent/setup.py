"""Session setup, before the first iteration: measure the baseline, then create and measure one branch
per seed, then measure the noise floors.

The noise floor: each seed is timed twice more, each time in a fresh process, one after the other
on one GPU and on the same fresh inputs, as the verify step times a head and a candidate. The gap
between two such timings of the same code (relative to the slower, at least 1%) is the smallest
gain an attempt on that seed's family must show (SessionState.family_floors); the largest gap is
the session's floor, for a family with no pair. On an H200 the four seeds' pairs came out 0.03% to
3.2% apart; on a 2-core VM five sessions' largest gaps were 1.4% to 43.4% (BENCHMARKS.md).
`--noise-floor` fixes one floor for all instead and skips the timings; `/noise` changes it while
the agent runs.

Idempotent, so a session that died during setup resumes it: what the events already record is
skipped, and a seed branch whose ref exists in git (a crash before its event) is reused.
All speedups are against the baseline measured here, in the same run.
"""
from __future__ import annotations

import json
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent import events as ev
from agent.beam import branch_name, geomean_se, noise_floor, relative_gap
from agent.harness.result import EvalResult, spec_label
from agent.harness.runner import evaluate
from agent.vcs import AttemptRecord, CaseLine, VcsError

if TYPE_CHECKING:
    from agent.loop import Agent

# One setup evaluation: a label (the branch, "#k" for the k-th noise timing), the file, the input
# draw (None: a fresh one), and what the progress line says.
Job = tuple[str, Path, int | None, str]


class Setup:
    def __init__(self, agent: "Agent"):
        self.agent = agent
        self.dir = agent.session.artifacts / "setup"

    def _evaluate(self, job: Job, abort: threading.Event, slot: int | None) -> EvalResult:
        a = self.agent
        label, path, nonce, what = job
        branch = label.split("#")[0]

        def progress(msg: dict[str, Any]) -> None:
            if msg.get("type") == "stage":
                a.emit(ev.EvalProgress(iteration=0, branch=branch, stage=str(msg.get("stage")), detail=what))
            elif msg.get("type") == "case" and msg.get("kind") == "benchmark":
                a.emit(ev.EvalProgress(iteration=0, branch=branch, stage="bench",
                                       detail=f"{what}: benchmark {int(msg.get('index', 0)) + 1}/{msg.get('total')}"))

        result = evaluate(path, a.task, a.eval_options(slot, nonce=nonce), on_progress=progress, cancel=abort)
        self.dir.mkdir(mode=0o700, exist_ok=True)
        a.write_artifact(self.dir / f"{label.replace('/', '_').replace('#', '_')}.json",
                         json.dumps(result.to_json(), indent=1, default=str))
        return result

    def _evaluate_all(self, groups: list[list[Job]], abort: threading.Event) -> dict[str, EvalResult]:
        """Evaluate setup jobs, one per evaluation slot at a time (two GPUs halve the setup). The jobs of
        a group run one after the other on one slot: the two noise timings of a seed compare like
        with like, as verify's do, and not one GPU with another."""
        slots = queue.Queue()
        for slot in self.agent.slots:
            slots.put(slot)

        def run(group: list[Job]) -> list[tuple[str, EvalResult]]:
            slot = slots.get()
            try:
                return [(job[0], self._evaluate(job, abort, slot)) for job in group]
            finally:
                slots.put(slot)
        with ThreadPoolExecutor(max_workers=max(1, len(self.agent.slots))) as pool:
            return {label: r for done in pool.map(run, groups) for label, r in done}

    def run(self, prior: list[ev.Event], stop: threading.Event, abort: threading.Event) -> bool:
        """False when stopped or aborted before setup finished (a resume continues it)."""
        a = self.agent
        task = a.task
        jobs: list[Job] = []
        if task.baseline is not None and not any(isinstance(e, ev.BaselineMeasured) for e in prior):
            jobs.append(("baseline", task.baseline, None, "setup"))
        # every family --families names starts; without it, the task's first --beam seeds
        named = task.seeds_named(a.cfg.families)
        named = named if a.cfg.families else named[: a.cfg.beam]
        seeds = [(branch_name(task.name, seed.stem), seed) for seed in named]
        jobs += [(name, seed, None, "setup") for name, seed in seeds if name not in a.state.branches]
        if stop.is_set() or abort.is_set():
            return False
        results = self._evaluate_all([[job] for job in jobs], abort) if jobs else {}
        if abort.is_set():
            return False  # cancelled evaluations measured nothing; a resume redoes them
        if "baseline" in results:
            r = results["baseline"]
            a.emit(ev.BaselineMeasured(geomean_us=r.geomean_us if r.ok else None, ok=r.ok,
                                       message=r.message if not r.ok else "",
                                       cases=[{"spec": c.spec, "mean_us": c.mean_us, "stderr_us": c.stderr_us}
                                              for c in r.benchmarks]))
        created = [e for e in prior if isinstance(e, ev.BranchCreated)]
        for name, seed in seeds:
            if abort.is_set():
                return False
            if name in results:
                made = self._seed(seed, name, results[name])
                if made is not None:
                    created.append(made)
        if abort.is_set():
            return False
        if a.cfg.noise_floor is None and not any(isinstance(e, ev.NoiseMeasured) for e in prior):
            return self._measure_noise([e for e in created if e.source.startswith("seed ") and e.geomean_us],
                                       stop, abort)
        return True

    def _measure_noise(self, seeds: list[ev.BranchCreated], stop: threading.Event, abort: threading.Event) -> bool:
        """Time each measured seed twice more, both on one fresh draw of inputs, and record the floor."""
        a = self.agent
        if stop.is_set():
            return False  # a resume measures it before the first iteration
        assert a.repo is not None
        pairs: list[list[Job]] = []
        timed = []
        for e in seeds:
            path = self.dir / f"noise_{e.branch.replace('/', '_')}.py"
            try:
                code = a.repo.read(e.sha)
            except VcsError as exc:
                a.emit(ev.ErrorEvent(where="setup", message=f"cannot read seed {e.branch} for the noise floor: {exc}"))
                continue
            self.dir.mkdir(mode=0o700, exist_ok=True)
            a.write_artifact(path, code)
            nonce = int.from_bytes(os.urandom(8), "little")
            pairs.append([(f"{e.branch}#{k}", path, nonce, f"setup: noise, timing {k} of 2") for k in (1, 2)])
            timed.append(e)
        results = self._evaluate_all(pairs, abort) if pairs else {}
        if abort.is_set():
            return False
        samples = []
        for e in timed:
            one, two = results[f"{e.branch}#1"], results[f"{e.branch}#2"]
            if one.ok and two.ok and one.geomean_us and two.geomean_us:
                samples.append({"branch": e.branch, "first_us": one.geomean_us, "again_us": two.geomean_us,
                                "gap": relative_gap(one.geomean_us, two.geomean_us)})
            else:  # it passed at its first timing: a failure now is worth a line of its own
                bad = one if not (one.ok and one.geomean_us) else two
                a.emit(ev.ErrorEvent(where="setup", message=f"seed {e.branch} failed when timed again for the noise "
                                                           f"floor ({bad.error_class}: {bad.message}); left out of it"))
        floor = noise_floor((s["first_us"], s["again_us"]) for s in samples)
        a.emit(ev.NoiseMeasured(floor=floor, samples=samples))
        return True

    def _seed(self, path: Path, name: str, r: EvalResult) -> ev.BranchCreated | None:
        a = self.agent
        assert a.repo is not None
        code = path.read_text()
        se = geomean_se(r.to_json().get("cases", [])) if r.ok else None
        base = a.state.baseline_us
        speedup = base / r.geomean_us if r.ok and base and r.geomean_us else None
        sha = a.repo.head(name)
        worst = r.worst_margin if r.ok else None
        try:
            if sha is None or a.repo.read(sha) != code:
                record = AttemptRecord(summary=f"seed {path.stem}: {path.name} from the task's candidates",
                                       iteration=0, branch=name, verdict="seed", ok=r.ok,
                                       error="" if r.ok else f"{r.error_class}: {r.message}",
                                       reason="the branch's starting point", geomean_us=r.geomean_us if r.ok else None,
                                       geomean_se_us=se, speedup=speedup, baseline_us=base,
                                       cases=[CaseLine(spec_label(c.spec), c.mean_us, c.stderr_us)
                                              for c in r.benchmarks],
                                       margin=worst.margin if worst else None,
                                       margin_case=spec_label(worst.spec) if worst else "")
                sha = a.repo.commit(code, record.message(), a.repo.root())
                a.repo.create_branch(name, sha)
        except VcsError as exc:
            a.emit(ev.ErrorEvent(where="setup", message=f"cannot create branch {name}: {exc}"))
            return None
        made = a.emit(ev.BranchCreated(branch=name, family=path.stem, sha=sha, source=f"seed {path.name}",
                                       geomean_us=r.geomean_us if r.ok else None, geomean_se_us=se))
        if not r.ok:
            a.emit(ev.ErrorEvent(where="setup", message=f"seed {path.name} failed its evaluation "
                                                      f"({r.error_class}: {r.message}); the branch starts unmeasured"))
        if a.state.branches and len(a.state.branches) == 1:
            a.repo.show(name)
        return made
