"""The Agent: drain the inbox, apply commands, pick a branch, propose, evaluate, commit, update the beam.

One evaluation per GPU at a time (one slot on the CPU); the main thread does everything but
the evaluations (and the prefetched proposals of llm/command), so events are appended in a
single order. `stop` ends the loop at an iteration boundary; `abort` cancels what is in flight,
records it as failed, and ends the loop. This module never imports the UI.
"""
from __future__ import annotations

import json
import os
import platform
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent import events as ev
from agent import faults
from agent.beam import NOISE_FLOOR, Beam, Judgement, geomean_se, judge, pick_branch, plateau, schedulable
from agent.config import RunConfig
from agent.harness.result import CUDA, STAGES, EvalResult, margin_text, spec_label
from agent.harness.runner import EvalOptions, check_gpu, discard_prestarted, evaluate, resolve_device
from agent.harness.task import Task, TaskError, bundled_tasks, load_task, resolve_task
from agent.hooks import Hooks
from agent.proposers import Proposal, make_proposer
from agent.reconcile import reconcile
from agent.recovery import Recoverer
from agent.session import (MAX_LINE_BYTES, AgentLock, EventLog, EventReader, Session, SessionError,
                           create_session, new_session_name, open_session, write_config)
from agent.setup import Setup
from agent.state import SessionState
from agent.steering import Directive, Steering
from agent.summary import format_event
from agent.vcs import AttemptRecord, CaseLine, SessionRepo, VcsError
from agent.workbench import Workbench

TAIL_CHARS = 2048
MAX_ERROR_BACKOFF_S = 900.0


def prepare_session(root: Path, name: str | None, cfg: RunConfig) -> Session:
    """A new session (name defaults to a timestamp) or an existing one to resume with `cfg`'s explicit options."""
    if name and (root / name / "session.toml").is_file():
        s = open_session(root, name)
        stored = RunConfig.from_toml(s.config())
        if "task" in cfg.explicit and _task_spec(cfg.task) != _task_spec(stored.task):
            raise SessionError(f"session {name!r} runs task {stored.task}; a resume cannot change the task")
        merged = stored.overridden_by(cfg).validate()
        if "families" in cfg.explicit:
            _check_families(merged)
        if cfg.explicit:
            write_config(s, merged.to_toml())
        return s
    cfg.validate()   # a new session: the options alone must make sense (a resume validates the merge)
    try:
        task = load_task(cfg.task)
    except TaskError as exc:
        raise SessionError(str(exc)) from None
    if not task.seed_candidates():
        raise SessionError(f"task {task.name} has no seed candidates in {task.candidates_dir or 'candidates/'}")
    _check_families(cfg, task)
    name = name or _fresh_name(root)
    stored = RunConfig.from_toml(cfg.to_toml())
    stored.task = _task_spec(cfg.task)
    return create_session(root, name, {"name": name, "created": time.time(), **stored.to_toml()})


def _check_families(cfg: RunConfig, task: Task | None = None) -> None:
    """SessionError, before anything runs, when --families names a family the task has no seed for."""
    try:
        (task or load_task(cfg.task)).seeds_named(cfg.families)
    except TaskError as exc:
        raise SessionError(str(exc)) from None


def _fresh_name(root: Path) -> str:
    base = new_session_name()
    name, n = base, 2
    while (root / name).exists():
        name, n = f"{base}-{n}", n + 1
    return name


def _task_spec(spec: str) -> str:
    """A bundled task by its name (portable), any other by its absolute path."""
    if spec in bundled_tasks() and not Path(spec).is_dir():
        return spec
    return str(resolve_task(spec))


@dataclass
class Flight:
    """One iteration whose candidate is being evaluated."""
    iteration: int
    branch: str
    parent: str
    gpu: int | None
    code: str
    proposal: Proposal
    slot: int
    steering_ids: list[str]
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    result: EvalResult | None = None
    abort_reason: str = ""
    parent_code: str = ""              # the head's code, re-timed before a win is accepted
    head_result: EvalResult | None = None
    again_result: EvalResult | None = None   # the candidate timed a second time, after the head


class Agent:
    def __init__(self, session: Session, cfg: RunConfig | None = None, echo: Callable[[str], None] | None = None):
        self.session = session
        stored = RunConfig.from_toml(session.config())
        self.cfg = stored.overridden_by(cfg) if cfg is not None else stored
        self.echo = echo
        self._emit_lock = threading.Lock()
        self.state = SessionState()
        self.hooks = Hooks(self.cfg.on_event, self.cfg.on_event_timeout_s)
        self.log: EventLog | None = None
        self.repo: SessionRepo | None = None
        self.flights: dict[int, Flight] = {}
        self.iterations_run = 0
        self._budget_said = ""        # the budget kind last reported, so BudgetReached is emitted once
        self._stop, self._abort = threading.Event(), threading.Event()
        self.took_over_from: int | None = None
        self.skipped_lines = 0
        self.gpu_probe: Callable[[int | None], tuple[bool, str]] = check_gpu   # a test may stand in for the GPU
        self.recover = Recoverer(self)
        self.stop_reason = "stop"     # what agent_stopped says when `stop` ends the run; a console may set "handoff"

    # -- events ------------------------------------------------------------------------------
    def emit(self, event: ev.Event) -> ev.Event:
        with self._emit_lock:
            assert self.log is not None
            self.recover.append(event)
            self.state.apply(event)
            line = format_event(event, self.state) if self.echo else None
        if line and self.echo:
            self.echo(line)
        self.hooks.fire(event)
        return event

    def write_artifact(self, path: Path, text: str) -> None:
        self.recover.write_artifact(path, text)

    # -- the run -----------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None, abort: threading.Event | None = None,
            mode: str = "headless") -> str:
        stop, abort = stop or threading.Event(), abort or threading.Event()
        self._stop, self._abort = stop, abort
        lock = AgentLock(self.session.lock_path).acquire(wait=self.cfg.lock_wait_s)
        self.took_over_from = lock.took_over_from
        reason, detail = "error", ""
        try:
            self.log = EventLog(self.session.events_path)
            reader = EventReader(self.session.events_path)
            prior = list(reader.iter_all())
            self.skipped_lines = reader.skipped
            self.state.apply_all(prior)
            self.run_started = time.time()
            self.prior_run_s = _running_seconds(prior)
            reason, detail = self._run(prior, stop, abort, mode)
        except Exception as exc:  # noqa: BLE001 - the record must say why the agent died
            detail = f"{type(exc).__name__}: {exc}"
            if self.log is not None:
                self.recover.last_words(ev.ErrorEvent(where="agent", message=detail, fatal=True))
        finally:
            for f in self.flights.values():
                f.cancel.set()
            if self.log is not None:
                self.recover.last_words(ev.AgentStopped(reason=reason, iterations=self.iterations_run, detail=detail))
                self.hooks.wait(2.0)
                self.log.close()
            if self.repo is not None:
                self.repo.close()
            discard_prestarted()   # a worker kept warm for an iteration that will not come
            lock.release()
        return reason

    def _run(self, prior: list[ev.Event], stop: threading.Event, abort: threading.Event,
             mode: str) -> tuple[str, str]:
        try:
            self.task: Task = load_task(self.cfg.task)
        except TaskError as exc:
            self.emit(ev.ErrorEvent(where="task", message=str(exc), fatal=True))
            return "error", str(exc)
        self.device = resolve_device(self.cfg.device)
        self.slots = self._slots()
        self.repo = SessionRepo.open_or_init(self.session.repo, f"Steer session {self.session.name}: task {self.task.name}")
        self.repo.on_recovery = lambda action, detail: self.emit(ev.Recovery(action=action, detail=detail))
        started = any(isinstance(e, ev.SessionStarted) for e in prior)
        if not started:
            self.emit(ev.SessionStarted(name=self.session.name, task=self.task.name, task_path=str(self.task.path),
                                        proposer=self.cfg.proposer, model=self.cfg.model, device=self.device,
                                        device_name=self._device_name(), gpus=[g for g in self.slots if g is not None],
                                        config=self.cfg.to_toml(), version=_version()))
        else:
            self.emit(ev.SessionResumed(pid=os.getpid(), next_iteration=self.state.iteration + 1, mode=mode,
                                        config=self.cfg.explicit_values()))
        if self.log and self.log.repaired_bytes:
            self.emit(ev.Recovery(action="torn events line cut",
                                  detail=f"{self.log.repaired_bytes} bytes of an unfinished line were removed"))
        if self.skipped_lines:
            self.emit(ev.Recovery(action="unreadable event lines skipped",
                                  detail=f"{self.skipped_lines} lines of events.jsonl are not events (garbage, or over "
                                         f"{MAX_LINE_BYTES >> 20} MB); left in place and ignored"))
        if self.took_over_from:
            self.emit(ev.Recovery(action="stale agent.lock taken over",
                                  detail=f"the agent that held it (pid {self.took_over_from}) is gone"))
        if started:
            reconcile(self.state, self.repo, self.session, self.emit)
        self.proposer = make_proposer(self.cfg)
        self.bench = Workbench(self)
        self.beam = Beam(self.state, self.repo, self.emit, self.task.name)
        self.steering = Steering(self.session, self.state, self.beam, self.emit, self.bench.check_set, self._set_budget,
                                 self._set_noise)
        self.steering.restore()
        if not Setup(self).run(prior, stop, abort):
            return ("abort", "") if abort.is_set() else (self.stop_reason, "stopped during setup")
        if not self.state.branches:
            self.emit(ev.ErrorEvent(where="setup", message="no branch could be created", fatal=True))
            return "error", "no branches"
        return self._loop(stop, abort)

    # -- the loop ----------------------------------------------------------------------------
    def _loop(self, stop: threading.Event, abort: threading.Event) -> tuple[str, str]:
        stopping: tuple[str, str] | None = None
        idle_reported = False
        self.backoff_until, self.backoff_s = 0.0, self.cfg.error_backoff_s
        while True:
            if abort.is_set():
                self._abort_flights("aborted")
                self._collect(block=False)
                return "abort", "aborted in flight"
            if self.recover.session_deleted():
                self._abort_flights("the session was deleted")
                self._collect(block=False)
                return "error", "the session directory was deleted"
            if len(self.flights) < len(self.slots):
                self.steering.drain()
                stopping = stopping or self._budget_reached()
                if stop.is_set():
                    stopping = stopping or (self.stop_reason, "")
                elif self.steering.stop_requested:
                    stopping = stopping or ("stop", "asked by /stop")
            if stopping is not None:
                if not self.flights:
                    self.bench.drop_prefetch()
                    return stopping
            elif time.time() >= self.backoff_until:
                self._fill_slots(abort)
            if not any(b.live for b in self.state.branches.values()):
                if not self.flights:
                    return "finished", "every branch was killed"
            if not self.flights:
                if not schedulable(self.state) and not idle_reported and stopping is None:
                    self.emit(ev.ErrorEvent(where="scheduler", message="no branch to schedule (all paused, or the "
                                            "focused one is not active); waiting for steering"))
                    idle_reported = True
                stop.wait(0.5)
                continue
            idle_reported = False
            self._collect(block=True, abort=abort)

    def _fill_slots(self, abort: threading.Event) -> None:
        for slot, gpu in enumerate(self.slots):
            if len(self.flights) >= len(self.slots) or self._budget_reached():
                return
            if any(f.slot == slot for f in self.flights.values()):
                continue
            busy = {f.branch for f in self.flights.values()}
            branch = self.bench.prefetched_branch(busy) or pick_branch(self.state, exclude=busy)
            if branch is None:
                return
            self._start(branch, slot, gpu, abort)
            if time.time() < self.backoff_until:
                return

    def _start(self, branch: str, slot: int, gpu: int | None, abort: threading.Event) -> None:
        i = self.state.iteration + 1
        b = self.state.branches[branch]
        parent = b.head_sha
        directives: list[Directive] = self.steering.for_branch(branch)
        self.emit(ev.IterationStarted(iteration=i, branch=branch, parent_sha=parent, gpu=gpu))
        self.iterations_run += 1
        proposal = self.bench.proposal(i, branch, parent, directives, abort)
        art = self.session.artifact_dir(i)
        self.write_artifact(art / "transcript.txt", proposal.transcript)
        if proposal.code is not None:
            self.write_artifact(art / "candidate.py", proposal.code)
        ids = [d.id for d in directives]
        self.emit(ev.ProposalMade(iteration=i, branch=branch, proposer=self.proposer.name, ok=proposal.ok,
                                  summary=proposal.summary, error=proposal.error, tokens_in=proposal.tokens_in,
                                  tokens_out=proposal.tokens_out, cost_usd=proposal.cost_usd,
                                  duration_s=round(proposal.duration_s, 3),
                                  transcript=f"artifacts/{i}/transcript.txt", steering_ids=ids,
                                  transient=proposal.transient))
        if not proposal.transient:
            self.steering.used(directives, i, branch)
        flight = Flight(iteration=i, branch=branch, parent=parent, gpu=gpu, code=proposal.code or "",
                        proposal=proposal, slot=slot, steering_ids=ids if not proposal.transient else [],
                        parent_code=self.bench.read(parent) if proposal.ok else "")
        if not proposal.ok:
            if abort.is_set():
                self.commit(flight, "failed", "aborted while proposing", ok=False, error="aborted",
                            code=self.bench.read(parent))
                return
            self._after_failed_proposal(flight)
            return
        self.backoff_s = self.cfg.error_backoff_s
        self.flights[i] = flight
        threading.Thread(target=self._evaluate, args=(flight,), daemon=True, name=f"steer-eval-{i}").start()
        self.bench.start_prefetch({f.branch for f in self.flights.values()})

    def _evaluate(self, f: Flight) -> None:
        stages = {s: n for n, s in enumerate(STAGES, 1)}

        def progress(msg: dict[str, Any]) -> None:
            if msg.get("type") == "stage":
                stage = str(msg.get("stage"))
                detail = f"stage {stages.get(stage, 0)}/{len(STAGES)}"
            elif msg.get("type") == "case" and msg.get("kind") == "benchmark":
                stage, detail = "bench", f"benchmark {int(msg.get('index', 0)) + 1}/{msg.get('total')}"
            else:
                return
            self.emit(ev.EvalProgress(iteration=f.iteration, branch=f.branch, stage=stage, detail=detail))

        try:
            f.result = evaluate(self.session.artifacts / str(f.iteration) / "candidate.py", self.task,
                                self.eval_options(f.gpu), on_progress=progress, cancel=f.cancel)
            if self._looks_like_a_win(f):
                # verify: time the head again, now, on the same GPU, before the win is believed; a
                # head measured slow by chance (a cold or busy machine) would let noise in for good
                head = self.session.artifacts / str(f.iteration) / "head.py"
                self.write_artifact(head, f.parent_code)
                self.emit(ev.EvalProgress(iteration=f.iteration, branch=f.branch, stage="verify",
                                          detail="apparent win: re-timing the head"))
                # the two re-timings draw the same inputs (a nonce neither process knows before it
                # runs): a time that depends on the draw, e.g. how many matrices take a fallback
                # path, then cancels out of the comparison
                paired = self.eval_options(f.gpu, nonce=int.from_bytes(os.urandom(8), "little"))
                f.head_result = evaluate(head, self.task, paired, cancel=f.cancel)
                if self._still_wins(f):
                    # ... and the candidate again: it was picked for a fast first timing, which is
                    # biased low (a lucky draw would let noise in too); a second one is not picked
                    self.emit(ev.EvalProgress(iteration=f.iteration, branch=f.branch, stage="verify",
                                              detail="apparent win: re-timing the candidate"))
                    f.again_result = evaluate(self.session.artifacts / str(f.iteration) / "candidate.py", self.task,
                                              paired, cancel=f.cancel)
        finally:
            f.done.set()

    def _looks_like_a_win(self, f: Flight) -> bool:
        r, b = f.result, self.state.branches.get(f.branch)
        if r is None or not r.ok or f.cancel.is_set() or not f.parent_code or b is None or not b.best_us:
            return False
        if self._over_margin(_worst_margin(r)):  # rejected whatever its time: no re-timing
            return False
        return self._first_beats(f, b.best_us, b.best_se_us)

    def _over_margin(self, worst: tuple[float, str] | None) -> bool:
        return worst is not None and self.cfg.max_margin is not None and worst[0] > self.cfg.max_margin

    def _still_wins(self, f: Flight) -> bool:
        """The first timing still beats the re-timed head (a re-timing that failed counts as a win here:
        the verdict then falls back on the recorded head time, and the candidate is timed again)."""
        r, h = f.result, f.head_result
        if r is None or h is None or f.cancel.is_set():
            return False
        if not h.ok or not h.geomean_us:
            return True
        return self._first_beats(f, h.geomean_us, geomean_se(h.to_json().get("cases", [])))

    def _first_beats(self, f: Flight, head_us: float, head_se: float | None) -> bool:
        r = f.result
        assert r is not None
        se = geomean_se(r.to_json().get("cases", []))
        floor, name = self.floor_for(f.branch)
        return judge(True, "", r.geomean_us, se, head_us, head_se, floor=floor,
                     floor_name=name).verdict == "accepted"

    @property
    def noise_floor(self) -> float:
        """The largest floor in force: --noise-floor or /noise if given, else the session's measured one."""
        if self.cfg.noise_floor is not None:
            return self.cfg.noise_floor
        return self.state.noise_floor or NOISE_FLOOR

    def floor_for(self, branch: str) -> tuple[float, str]:
        """The smallest relative gain accepted on `branch`, and its name for a verdict's reason:
        --noise-floor or /noise if given (one for all); else the floor measured on the branch's
        family (its seed timed twice), as the noise of one family's code says nothing about
        another's (H200: cholqr's pair 3.2% apart, superpanel's 1.3%); else the session's."""
        if self.cfg.noise_floor is None:
            b = self.state.branches.get(branch)
            own = self.state.family_floors().get(b.family) if b is not None else None
            if own is not None:
                return own, f"{b.family}'s noise floor"
        return self.noise_floor, "the session's noise floor"

    def eval_options(self, gpu: int | None, nonce: int | None = None) -> EvalOptions:
        return EvalOptions(mode=self.cfg.eval_mode, device=self.device, gpu=gpu, stage_timeout=self.cfg.stage_timeout,
                           prestart=True, nonce=nonce)

    def _collect(self, block: bool, abort: threading.Event | None = None) -> None:
        """Commit every finished evaluation; with `block`, first wait for one (watching for aborts)."""
        while block and self.flights and not any(f.done.is_set() for f in self.flights.values()):
            if abort is not None and abort.is_set():
                self._abort_flights("aborted")
            ids = self.steering.peek_aborts()
            if ids:
                for sid in ids:
                    self.steering.abort_acted[sid] = min(self.flights)
                self._abort_flights("aborted by /abort")
            next(iter(self.flights.values())).done.wait(0.2)
        for i in sorted(self.flights):
            f = self.flights[i]
            if not block:
                f.done.wait(15)  # cancelled: the harness kills the worker within its poll interval
            if f.done.is_set():
                del self.flights[i]
                self._finish(f)

    def _abort_flights(self, why: str) -> None:
        for f in self.flights.values():
            f.cancel.set()
            f.abort_reason = f.abort_reason or why

    # -- recording ---------------------------------------------------------------------------
    def _finish(self, f: Flight) -> None:
        r = f.result
        aborted = f.abort_reason if f.cancel.is_set() else ""
        if r is None:
            r = EvalResult(ok=False, error_class="harness", message="the evaluation thread ended without a result",
                           stage=None, mode=self.cfg.eval_mode, device=self.device, task=self.task.name, candidate="")
        full = r.to_json()
        self.write_artifact(self.session.artifacts / str(f.iteration) / "eval.json",
                            json.dumps(full, indent=1, default=str))
        se = geomean_se(full.get("cases", [])) if r.ok else None
        base = self.state.baseline_us
        speedup = base / r.geomean_us if r.ok and base and r.geomean_us else None
        message = aborted or r.message
        self.emit(ev.EvalFinished(iteration=f.iteration, branch=f.branch, ok=r.ok and not aborted,
                                  error_class="aborted" if aborted else r.error_class, message=message,
                                  geomean_us=r.geomean_us, speedup=speedup, result=trim_result(full)))
        if r.error_class == CUDA and self.device == "cuda":
            self.recover.recheck_gpu(f.gpu)
        b = self.state.branches[f.branch]
        error = aborted or (f"{r.error_class}: {r.message}" if not r.ok else "")
        head_us, head_se, retimed = b.best_us, b.best_se_us, ""
        h = f.head_result
        if h is not None:
            hj = h.to_json()
            self.write_artifact(self.session.artifacts / str(f.iteration) / "head_eval.json",
                                json.dumps(hj, indent=1, default=str))
            if h.ok and h.geomean_us:
                head_us, head_se = h.geomean_us, geomean_se(hj.get("cases", []))
                retimed = f"; the head re-timed at {h.geomean_us:.2f} µs (recorded {b.best_us:.2f} µs)"
            else:
                retimed = f"; re-timing the head failed ({h.error_class}: {h.message}), judged on its recorded time"
        ok, new_us, benchmarks, spread = r.ok and not aborted, r.geomean_us, r.benchmarks, 0.0
        a = f.again_result
        if a is not None and ok:
            aj = a.to_json()
            self.write_artifact(self.session.artifacts / str(f.iteration) / "again_eval.json",
                                json.dumps(aj, indent=1, default=str))
            if a.ok and a.geomean_us:
                # the second timing is the one judged and recorded: the first was picked for being fast
                retimed += (f"; the candidate re-timed at {a.geomean_us:.2f} µs on the head's inputs "
                            f"(first {r.geomean_us:.2f} µs)")
                new_us, se, benchmarks = a.geomean_us, geomean_se(aj.get("cases", [])), a.benchmarks
                spread = abs(a.geomean_us - r.geomean_us)  # the same code twice: the noise between runs
                speedup = base / new_us if base else None
            else:  # correct once, then not (or crashed): a flaky candidate is not a win
                ok, error = False, f"timed again, it failed: {a.error_class}: {a.message}"
        floor, name = self.floor_for(f.branch)
        verdict = judge(ok, error, new_us, se, head_us, head_se, spread, floor=floor, floor_name=name)
        verdict.reason += retimed
        worst = _worst_margin(r, a)
        if verdict.verdict == "accepted" and self._over_margin(worst):
            assert worst is not None and self.cfg.max_margin is not None
            verdict = Judgement("rejected", f"its outputs used {margin_text(worst[0])} of the checker's tolerance "
                                            f"({worst[1]}), over this session's limit of "
                                            f"{margin_text(self.cfg.max_margin)} (--max-margin); otherwise: "
                                            f"{verdict.reason}")
        cases = [CaseLine(spec_label(c.spec), c.mean_us, c.stderr_us) for c in benchmarks]
        fresh = (head_us, head_se) if h is not None and h.ok and h.geomean_us else None
        self.commit(f, verdict.verdict, verdict.reason, ok=ok, error=error,
                    geomean=new_us, se=se, speedup=speedup, cases=cases, head=fresh, margin=worst)

    def _after_failed_proposal(self, f: Flight) -> None:
        p = f.proposal
        self.commit(f, "failed", f"proposal failed: {p.error}", ok=False, error=f"no candidate: {p.error}",
                    code=self.bench.read(f.parent))
        b = self.state.branches[f.branch]
        if p.transient:
            wait = self.backoff_s
            self.backoff_until = time.time() + wait
            self.backoff_s = min(MAX_ERROR_BACKOFF_S, self.backoff_s * 2)
            self.emit(ev.ErrorEvent(where="proposer", message=f"{p.error}; the loop pauses {wait:g} s and retries",
                                    iteration=f.iteration))
        elif p.exhausted:
            self.beam.pause(f.branch, reason=f"paused by the agent: {p.error}")
        elif b.proposal_fail_streak >= self.cfg.proposal_fail_limit:
            self.beam.pause(f.branch, reason=f"paused by the agent after {b.proposal_fail_streak} failed proposals: "
                                             f"{p.error}")

    def commit(self, f: Flight, verdict: str, reason: str, ok: bool, error: str, geomean: float | None = None,
               se: float | None = None, speedup: float | None = None, cases: list[CaseLine] | None = None,
               code: str | None = None, head: tuple[float, float | None] | None = None,
               margin: tuple[float, str] | None = None) -> None:
        assert self.repo is not None
        summary = f.proposal.summary or f"{self.proposer.name}: no proposal ({f.proposal.error or 'no code'})"
        record = AttemptRecord(summary=summary, iteration=f.iteration,
                               branch=f.branch, verdict=verdict, reason=reason, ok=ok, error=error, geomean_us=geomean,
                               geomean_se_us=se, speedup=speedup, baseline_us=self.state.baseline_us,
                               cases=cases or [], steering_ids=f.steering_ids,
                               margin=margin[0] if margin else None, margin_case=margin[1] if margin else "")
        body = code if code is not None else f.code
        sha = self.repo.commit(body, record.message(), f.parent)
        faults.point("commit:object")
        self.repo.mark_attempt(f.iteration, sha)
        faults.point("commit:attempt-ref")
        ref = f"refs/attempts/{f.iteration}"
        if verdict == "accepted":
            try:
                self.recover.move_branch(f.branch, sha, f.parent)
                ref = f"refs/heads/{f.branch}"
            except VcsError as exc:  # the ref cannot be moved: keep the attempt, report, do not move
                verdict, reason = "rejected", f"accepted but not applied: {exc}"
        faults.point("commit:refs")
        self.write_artifact(self.session.artifacts / str(f.iteration) / "diff.patch", self.repo.diff(f.parent, sha))
        self.emit(ev.AttemptCommitted(iteration=f.iteration, branch=f.branch, sha=sha, parent_sha=f.parent,
                                      verdict=verdict, summary=f.proposal.summary, geomean_us=geomean,
                                      speedup=speedup, reason=reason, ref=ref, geomean_se_us=se,
                                      head_us=head[0] if head else None, head_se_us=head[1] if head else None,
                                      margin=margin[0] if margin else None))
        if verdict == "accepted":
            self.repo.show(f.branch)
        b = self.state.branches.get(f.branch)
        if b is not None:
            found = plateau(b, self.cfg.plateau_attempts, self.cfg.plateau_minutes)
            if found is not None:
                self.emit(found)

    # -- budgets -----------------------------------------------------------------------------
    def _budget_reached(self) -> tuple[str, str] | None:
        c = self.cfg
        hours = (self.prior_run_s + time.time() - self.run_started) / 3600
        checks = [("iterations", c.max_iterations, float(self.state.iteration)),
                  ("hours", c.max_hours, hours), ("cost", c.max_cost, self.state.cost_usd)]
        for kind, limit, value in checks:
            if limit is not None and value >= limit:
                if self._budget_said != kind:
                    self._budget_said = kind
                    self.emit(ev.BudgetReached(kind=kind, limit=float(limit), value=round(value, 4)))
                return "budget", f"{kind} {value:g} >= {limit:g}"
        return None

    def _set_budget(self, changes: dict[str, float | None]) -> str:
        for name, value in changes.items():
            setattr(self.cfg, name, value)
        write_config(self.session, self.cfg.to_toml())
        self._budget_said = ""
        return ", ".join(f"{k.replace('max_', '')}={'none' if v is None else f'{v:g}'}" for k, v in changes.items())

    def _set_noise(self, floor: float | None) -> float:
        self.cfg.noise_floor = floor
        write_config(self.session, self.cfg.to_toml())
        return self.noise_floor

    def _slots(self) -> list[int | None]:
        """One evaluation at a time per GPU (`--gpus 0,1`: two, each on its own GPU); the CPU has one slot."""
        if self.device == "cuda":
            return list(dict.fromkeys(self.cfg.gpus)) or [None]
        return [None]

    def _device_name(self) -> str:
        if self.device == "cuda":
            ok, name = self.gpu_probe(self.slots[0])
            return name if ok else f"GPU check failed: {name}"
        return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


def trim_result(full: dict[str, Any]) -> dict[str, Any]:
    """The harness JSON for the event: tails cut to ~2 KB (the full one is in artifacts/<i>/eval.json)."""
    out = dict(full)
    for key in ("stdout_tail", "stderr_tail"):
        text = str(out.get(key) or "")
        if len(text) > TAIL_CHARS:
            out[key] = "[...]" + text[-TAIL_CHARS:]
    return out


def _worst_margin(*results: EvalResult | None) -> tuple[float, str] | None:
    """The most of the checker's tolerance any passing evaluation's output used, and its case."""
    cases = [c for r in results if r is not None and r.ok for c in [r.worst_margin] if c is not None]
    worst = max(cases, key=lambda c: c.margin or 0.0, default=None)
    return (worst.margin, spec_label(worst.spec)) if worst is not None and worst.margin is not None else None


def _running_seconds(events: list[ev.Event]) -> float:
    """Wall time agents ran this session before now: each run from its start/resume to its last event."""
    total, start, last = 0.0, None, 0.0
    for e in events:
        if isinstance(e, (ev.SessionStarted, ev.SessionResumed)):
            if start is not None:
                total += max(0.0, last - start)
            start = e.ts
        last = e.ts
    if start is not None:
        total += max(0.0, last - start)
    return total


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("steer-console")
    except Exception:  # noqa: BLE001
        return ""
