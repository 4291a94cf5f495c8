"""Parent side of the harness: run one candidate in a sandboxed worker and return one EvalResult.

Nothing the candidate does can crash the caller: it runs in its own process group, each stage
has a time limit, its output is drained into bounded tails, and the group is killed at the end.
"""
from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from agent.harness.result import (
    CRASH, GUARD, HARNESS, STAGES, SYNTAX, TIMEOUT, CaseResult, EvalResult,
)
from agent.harness.privileges import protect_self
from agent.harness.sandbox import Sandbox
from agent.harness.task import REPO_ROOT, Task

TAIL_BYTES = 16 * 1024
MAX_PIPE_LINE = 8 * 1024 * 1024
MESSAGE_CHARS = 4000        # a result message longer than this is cut (it ends up in events and prompts)
DEFAULT_STAGE_LIMITS = {"import": 120.0, "smoke": 180.0, "tests": 300.0, "bench": 600.0}
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "steer"

Progress = Callable[[dict[str, Any]], None]


@dataclass
class EvalOptions:
    mode: str = "quick"
    device: str = "auto"           # auto | cpu | cuda
    gpu: int | None = None         # index into the machine's GPUs; None = the first
    stage_timeout: float | None = None  # one limit for every stage; None = the task's limits
    nonce: int | None = None       # fixes the input seeds (tests; the loop's paired re-timings); None = fresh
    prestart: bool = False         # keep a worker started for the next evaluation (the agent loop)


class _Tail:
    """Keeps the last TAIL_BYTES of a stream, draining it so the writer never blocks."""

    def __init__(self, stream):
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.total = 0
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream) -> None:
        try:
            while chunk := stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536):
                self.total += len(chunk)
                self._chunks.append(chunk)
                self._size += len(chunk)
                while self._size - len(self._chunks[0]) >= TAIL_BYTES:
                    self._size -= len(self._chunks.popleft())
        except (OSError, ValueError):
            pass

    def text(self, wait: float = 0.5) -> str:
        self._thread.join(wait)
        data = b"".join(self._chunks)[-TAIL_BYTES:]
        text = data.decode("utf-8", "replace")
        if self.total > len(data):
            text = f"[... {self.total - len(data)} earlier bytes dropped]\n" + text
        return text


def resolve_device(device: str) -> str:
    if device in ("cpu", "cuda"):
        return device
    if device != "auto":
        raise ValueError(f"device must be auto, cpu or cuda, not {device!r}")
    return "cuda" if cuda_available() else "cpu"


_cuda_probe: bool | None = None


def cuda_available() -> bool:
    """Whether a GPU is usable, asked in a subprocess so the caller never initialises CUDA itself."""
    global _cuda_probe
    if _cuda_probe is None:
        if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
            _cuda_probe = False
        else:
            try:
                probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                                       capture_output=True, text=True, timeout=120)
                _cuda_probe = probe.stdout.strip() == "True"
            except (OSError, subprocess.TimeoutExpired):
                _cuda_probe = False
    return _cuda_probe


def stage_limits(task: Task, mode: str, override: float | None) -> dict[str, float]:
    if override is not None:
        return {s: float(override) for s in DEFAULT_STAGE_LIMITS}
    limits = dict(DEFAULT_STAGE_LIMITS)
    limits["tests"] = task.timeouts.get("test_timeout", limits["tests"])
    bench_key = "ranked_timeout" if mode == "leaderboard" else "benchmark_timeout"
    limits["bench"] = task.timeouts.get(bench_key, limits["bench"])
    return limits


def _failed(task: Task, candidate: Path, opts: EvalOptions, device: str, error_class: str, message: str,
            stage: str | None, **extra: Any) -> EvalResult:
    return EvalResult(ok=False, error_class=error_class, message=message, stage=stage, mode=opts.mode,
                      device=device, task=task.name, candidate=str(candidate), **extra)


def evaluate(candidate: Path | str, task: Task, opts: EvalOptions | None = None,
             on_progress: Progress | None = None, cancel: threading.Event | None = None) -> EvalResult:
    """Evaluate one candidate file against one task; never raises for anything the candidate does."""
    opts = opts or EvalOptions()
    candidate = Path(candidate)
    started = time.monotonic()
    device = opts.device if opts.device in ("cpu", "cuda") else "auto"
    try:
        source = candidate.read_bytes()
    except OSError as exc:
        return _failed(task, candidate, opts, device, HARNESS, f"cannot read {candidate}: {exc.strerror}", None)
    flags = ["stream"] if b"stream" in source.lower() else []
    try:
        compile(source, "submission.py", "exec")
    except SyntaxError as exc:
        return _failed(task, candidate, opts, device, SYNTAX, f"line {exc.lineno}: {exc.msg}", "import",
                       flags=flags, wall_s=time.monotonic() - started)
    except ValueError as exc:
        return _failed(task, candidate, opts, device, SYNTAX, f"not Python source: {exc}", "import",
                       flags=flags, wall_s=time.monotonic() - started)
    device = resolve_device(opts.device)  # after the syntax check: rejecting a typo needs no GPU probe
    try:
        started_worker = _take_prestarted(task, device, opts) or _start_worker(task, device, opts)
    except OSError as exc:
        return _failed(task, candidate, opts, device, HARNESS, f"cannot start the worker: {exc}", None)
    if opts.prestart:  # the next evaluation finds a worker that has already imported torch
        try:
            _PRESTARTED[_key(task, device, opts)] = _start_worker(task, device, opts)
        except OSError:
            pass
    try:
        result = _run_worker(started_worker, source, candidate, task, opts, device, on_progress, cancel)
    finally:
        started_worker.box.cleanup()
    result.flags = flags
    result.wall_s = time.monotonic() - started
    return result


@dataclass
class _Started:
    """A worker process that has been spawned and waits for its configuration on stdin."""
    box: Sandbox
    proc: subprocess.Popen
    r_fd: int
    w_fd: int
    out_tail: _Tail
    err_tail: _Tail
    writable: list[str]

    def discard(self) -> None:
        for fd in (self.r_fd, self.w_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.box.kill_all(self.proc.pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.box.cleanup()


_PRESTARTED: dict[tuple, _Started] = {}


def _key(task: Task, device: str, opts: EvalOptions) -> tuple:
    return (str(task.path), device, opts.gpu)


def _take_prestarted(task: Task, device: str, opts: EvalOptions) -> _Started | None:
    w = _PRESTARTED.pop(_key(task, device, opts), None)
    if w is not None and w.proc.poll() is not None:  # it died while waiting
        w.discard()
        return None
    return w


@atexit.register
def discard_prestarted() -> None:
    while _PRESTARTED:
        _PRESTARTED.popitem()[1].discard()


def _start_worker(task: Task, device: str, opts: EvalOptions) -> _Started:
    protect_self()
    box = Sandbox.create(task.files())
    triton_cache = CACHE_ROOT / "triton"
    triton_cache.mkdir(parents=True, exist_ok=True)
    visible = "" if device == "cpu" else str(opts.gpu if opts.gpu is not None else _first_visible_gpu())
    # One CPU thread on the CPU path: OpenMP spin-waiting on a shared box makes timings swing 50x.
    cpu_threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if device == "cpu" else {}
    env = box.env(dict(os.environ), visible, {
        **cpu_threads,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        "TRITON_CACHE_DIR": str(triton_cache),
    })
    r_fd, w_fd = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "agent.harness.worker"], cwd=box.work_dir, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                pass_fds=(w_fd,), start_new_session=True)
    except OSError:
        os.close(r_fd)
        os.close(w_fd)
        box.cleanup()
        raise
    limits = stage_limits(task, "leaderboard", opts.stage_timeout)
    box.limit(proc.pid, cpu_seconds=int(sum(limits.values()) * max(1, os.cpu_count() or 1)) + 60,
              on_cpu=device == "cpu")
    return _Started(box=box, proc=proc, r_fd=r_fd, w_fd=w_fd, out_tail=_Tail(proc.stdout),
                    err_tail=_Tail(proc.stderr), writable=[str(box.work_dir), str(triton_cache)])


def _run_worker(w: _Started, source: bytes, candidate: Path, task: Task, opts: EvalOptions, device: str,
                on_progress: Progress | None, cancel: threading.Event | None) -> EvalResult:
    tests, benchmarks = task.cases(on_gpu=device == "cuda")
    limits = stage_limits(task, opts.mode, opts.stage_timeout)
    key = os.urandom(32)
    cfg = {
        "mode": opts.mode, "tests": tests, "benchmarks": benchmarks, "ranking_by": task.ranking_by,
        "task_dir": str(w.box.task_dir), "candidate_path": str(w.box.install_candidate(source)),
        "result_fd": w.w_fd, "key": key.hex(), "repo_root": str(REPO_ROOT), "writable": w.writable,
        "nonce": opts.nonce if opts.nonce is not None else int.from_bytes(os.urandom(8), "little"),
    }
    os.close(w.w_fd)
    w.w_fd = -1
    try:
        w.proc.stdin.write(json.dumps(cfg).encode())
        w.proc.stdin.close()
    except OSError:
        pass  # the worker died at start; the result pipe's EOF says so below
    session = _Session(limits, key, on_progress, cancel)
    try:
        session.follow(w.r_fd, w.proc)
    finally:
        os.close(w.r_fd)
        w.r_fd = -1
        w.box.kill_all(w.proc.pid)
        try:
            code = w.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
    return session.result(task, candidate, opts, device, code, w.out_tail.text(), w.err_tail.text())


def _first_visible_gpu() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible.split(",")[0] if visible else "0"


class _Session:
    """Follows the worker's message pipe, enforcing each stage's deadline."""

    def __init__(self, limits: dict[str, float], key: bytes, on_progress: Progress | None,
                 cancel: threading.Event | None):
        self.limits = limits
        self.key = key
        self.n = 0                  # running number of the last authentic line
        self.forged: bytes | None = None   # the first line on the pipe that the worker did not write
        self.done: list[str] = []   # stages finished, in order
        self.on_progress = on_progress
        self.cancel = cancel
        self.stage: str | None = None
        self.stage_started = time.monotonic()
        self.deadline = time.monotonic() + limits["import"]
        self.stage_s: dict[str, float] = {}
        self.hello: dict[str, Any] = {}
        self.sandbox = ""
        self.final: dict[str, Any] | None = None
        self.failure: dict[str, Any] | None = None
        self.timed_out = False
        self.aborted = False

    def follow(self, fd: int, proc: subprocess.Popen) -> None:
        buf = b""
        exited_at: float | None = None
        while True:
            if self.cancel is not None and self.cancel.is_set():
                self.aborted = True
                return
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                return
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.2))
            if not ready:
                # A forked grandchild may hold the pipe open after the worker died: don't wait for EOF.
                if proc.poll() is not None:
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > 0.5:
                        return
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            buf += chunk
            if len(buf) > MAX_PIPE_LINE:  # no line the worker writes is this long: a flood, not a result
                self.forged = buf[:80]
                return
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self._handle(line)
                if self.final is not None or self.failure is not None or self.forged is not None:
                    return

    def _authentic(self, line: bytes) -> dict[str, Any] | None:
        """The message if the worker wrote this line (right tag, next number); else remember the forgery."""
        tag, _, body = line.partition(b" ")
        expected = hmac.new(self.key, body, hashlib.sha256).hexdigest().encode()
        msg = None
        if hmac.compare_digest(tag, expected):
            try:
                msg = json.loads(body)
            except ValueError:
                msg = None
        if not isinstance(msg, dict) or msg.get("n") != self.n + 1:
            self.forged = line
            return None
        self.n += 1
        return msg

    def _handle(self, line: bytes) -> None:
        msg = self._authentic(line)
        if msg is None:
            return
        kind = msg.get("type")
        now = time.monotonic()
        if kind == "hello":
            self.hello = msg
        elif kind == "stage":
            self.stage = str(msg.get("stage"))
            self.stage_started = now
            self.deadline = now + self.limits.get(self.stage, max(self.limits.values()))
        elif kind == "stage_done":
            self.stage_s[str(msg.get("stage"))] = round(now - self.stage_started, 4)
            self.done.append(str(msg.get("stage")))
        elif kind == "sandbox":
            self.sandbox = str(msg.get("note", ""))
        elif kind == "result":
            self.final = msg
        elif kind == "failure":
            self.failure = msg
        if self.on_progress is not None and kind in ("stage", "case", "stage_done"):
            try:
                self.on_progress(msg)
            except Exception:  # noqa: BLE001 - a progress consumer must not break the evaluation
                pass

    def result(self, task: Task, candidate: Path, opts: EvalOptions, device: str, code: int | None,
               stdout: str, stderr: str) -> EvalResult:
        common = dict(mode=opts.mode, task=task.name, candidate=str(candidate),
                      device=self.hello.get("device", device), versions=self.hello.get("versions", {}),
                      stderr_tail=stderr, stdout_tail=stdout, stage_s=self.stage_s, exit_code=code,
                      sandbox=self.sandbox)
        if self.forged is not None:
            shown = self.forged[:80].decode("utf-8", "replace")
            return EvalResult(ok=False, error_class=GUARD, stage=self.stage or "import",
                              message=f"the result pipe carried a line the harness did not write ({shown!r}); "
                                      "the candidate wrote into the harness's channel", **common)
        if self.final is not None and self.done != list(STAGES):
            return EvalResult(ok=False, error_class=GUARD, stage=self.stage or "import",
                              message=f"a result arrived after stages {self.done}, not after all of {list(STAGES)}",
                              **common)
        if self.final is not None:
            cases = [CaseResult.from_json(c) for c in self.final.get("cases", [])]
            return EvalResult(ok=True, error_class=None, message="", stage=None, cases=cases,
                              geomean_us=self.final.get("geomean_us"), timed_s=float(self.final.get("timed_s", 0)),
                              **common)
        if self.failure is not None:
            return EvalResult(ok=False, error_class=str(self.failure.get("error_class")),
                              message=_cut(str(self.failure.get("message", ""))), stage=self.stage, **common)
        if self.aborted:
            return EvalResult(ok=False, error_class=TIMEOUT, message="aborted on request", stage=self.stage, **common)
        if self.timed_out:
            limit = self.limits.get(self.stage or "import")
            return EvalResult(ok=False, error_class=TIMEOUT, stage=self.stage or "import",
                              message=f"stage {self.stage or 'import'} ran past its {limit:g} s limit; "
                                      "the process group was killed", **common)
        return EvalResult(ok=False, error_class=CRASH, stage=self.stage or "import",
                          message=_death(code), **common)


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + " [...]"


def _death(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        import signal
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker was killed by {name} before reporting a result"
    return f"the worker exited with code {code} before reporting a result"


def check_gpu(gpu: int | None = None, timeout: float = 60.0) -> tuple[bool, str]:
    """Run a tiny kernel in a fresh process: is the GPU healthy after a candidate's CUDA fault?"""
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = str(gpu if gpu is not None else _first_visible_gpu())
    code = ("import torch; x = torch.arange(1024., device='cuda'); torch.cuda.synchronize(); "
            "assert float(x.sum()) == 523776.0; print(torch.cuda.get_device_name())")
    try:
        probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, f"GPU probe did not finish in {timeout:g} s"
    if probe.returncode != 0:
        return False, (probe.stderr.strip().splitlines() or ["GPU probe failed"])[-1]
    return True, probe.stdout.strip()
