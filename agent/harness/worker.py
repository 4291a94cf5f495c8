"""Child side of the harness: import one candidate, check it on the tests, time it on the benchmarks.

Started by runner.py as `python -m agent.harness.worker` inside a private sandbox. The
configuration arrives as JSON on stdin; progress and the result leave as JSON lines on a
dedicated pipe (fd given in the config), so whatever the candidate prints cannot corrupt them.
"""
from __future__ import annotations

if __name__ == "__main__":  # first, before torch starts a thread: capabilities belong to each thread
    from agent.harness.privileges import drop_root_capabilities
    _PRIVILEGES = drop_root_capabilities()

import builtins
import hashlib
import hmac
import importlib
import json
import math
import os
import platform
import random
import sys
import threading
import time
import traceback
from typing import Any, Callable

import torch

from agent.harness import guard as guard_mod
from agent.harness import landlock, result, timing
from agent.harness.result import (
    CRASH, CUDA, EXCEPTION, GUARD, HARNESS, IMPORT, INTERFACE, SYNTAX, WRONG, CaseResult, rank_score,
)

CUDA_MARKERS = ("CUDA error", "cuda runtime error", "CUBLAS_STATUS", "CUSOLVER_STATUS", "CUDA out of memory",
                "device-side assert", "an illegal memory access", "unspecified launch failure", "cudaErrorLaunch")


class StageFailure(Exception):
    def __init__(self, error_class: str, message: str):
        super().__init__(message)
        self.error_class = error_class
        self.message = message


class Channel:
    """The result pipe. Each line is `TAG JSON`: an HMAC of the JSON under a key only the runner and
    this object know, and a running number, so a line the candidate writes into the fd is refused."""

    def __init__(self, fd: int, key: bytes):
        self._f = os.fdopen(fd, "w", buffering=1)
        self._key = key
        self._n = 0

    def send(self, **msg: Any) -> None:
        self._n += 1
        body = json.dumps({**msg, "n": self._n}, default=str)
        tag = hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()
        self._f.write(f"{tag} {body}\n")
        self._f.flush()


def classify(exc: BaseException) -> str:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return CUDA
    accel = getattr(torch, "AcceleratorError", None)
    if accel is not None and isinstance(exc, accel):
        return CUDA
    text = f"{type(exc).__name__}: {exc}"
    if any(m in text for m in CUDA_MARKERS):
        return CUDA
    return EXCEPTION


def describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"candidate called sys.exit({exc.code!r})"
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb)
                  if os.path.basename(f.filename) == "submission.py"), None)
    text = f"{type(exc).__name__}: {exc}".strip()
    text = text if len(text) < 2000 else text[:2000] + "..."
    return f"{text} (at {where})" if where else text


def _check(check: Callable, data: Any, output: Any) -> tuple[bool, str, float | None]:
    """(ok, message, margin): margin is the fraction of the checker's tolerance the output used,
    where the checker is the task's check_margin (a third element), else None."""
    try:
        verdict = check(data, output)
    except Exception as exc:  # noqa: BLE001 - a malformed output can crash the checker
        return False, f"checker raised on this output: {describe(exc)}", None
    if isinstance(verdict, tuple):
        margin = _margin(verdict[2]) if len(verdict) > 2 else None
        return bool(verdict[0]), str(verdict[1]) if len(verdict) > 1 else "", margin
    if isinstance(verdict, str):
        return verdict == "", verdict, None
    return bool(verdict), "" if verdict else "checker rejected the output", None


def _margin(value: Any) -> float | None:
    try:
        m = float(value)
    except (TypeError, ValueError):  # the task's extension misbehaving costs the number, not the verdict
        return None
    return m if math.isfinite(m) and m >= 0 else None


class Worker:
    def __init__(self, cfg: dict[str, Any], chan: Channel):
        self.cfg = cfg
        self.chan = chan
        self.mode = cfg["mode"]
        self.policy = timing.POLICIES[self.mode]
        self.nonce = int(cfg["nonce"])
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.rng = random.Random(self.nonce)
        self.timed_s = 0.0
        self.reference: Any = None
        self.kernel: Callable | None = None
        self.guard: guard_mod.Guard | None = None

    # -- stages ---------------------------------------------------------------------------
    def run(self) -> None:
        tests, benchmarks = self.cfg["tests"], self.cfg["benchmarks"]
        self.stage("import", self.load)
        smallest = min(range(len(tests)), key=lambda i: _size(tests[i]))
        cases: list[CaseResult] = []
        self.stage("smoke", lambda: cases.append(self.test(tests[smallest], 0, 1)))
        rest = [t for i, t in enumerate(tests) if i != smallest]
        self.stage("tests", lambda: cases.extend(self.test(t, i, len(rest)) for i, t in enumerate(rest)))
        bench: list[CaseResult] = []
        self.stage("bench", lambda: bench.extend(self.bench(b, i, len(benchmarks)) for i, b in enumerate(benchmarks)))
        means = [c.mean_us for c in bench]
        score = rank_score(means, self.cfg.get("ranking_by", "geom")) if bench else None
        self.chan.send(type="result", cases=[c.__dict__ for c in cases + bench], geomean_us=score,
                       timed_s=self.timed_s)

    def stage(self, name: str, body: Callable[[], Any]) -> None:
        self.chan.send(type="stage", stage=name)
        body()
        self.verify_guard(name)
        self.chan.send(type="stage_done", stage=name)

    def load(self) -> None:
        sys.path[:0] = [self.cfg["task_dir"]]
        try:  # the task's fault, not the candidate's: reported as harness
            self.reference = importlib.import_module("reference")
        except BaseException as exc:  # noqa: BLE001
            raise StageFailure(HARNESS, f"the task's reference.py failed to import: {describe(exc)}") from None
        ref = self.reference
        for name in ("generate_input", "check_implementation"):
            if not callable(getattr(ref, name, None)):
                raise StageFailure(HARNESS, f"the task's reference.py has no callable {name}")
        self.guard = guard_mod.Guard({
            **timing.watched(),
            "reference module": lambda: sys.modules.get("reference"),
        }, *_guarded_spaces(self.cfg["task_dir"]))
        # check_margin, where the task has it, is check_implementation's verdict plus how much of its
        # tolerance the output used (a Steer extension; GPU MODE calls check_implementation only)
        self.check = ref.check_margin if callable(getattr(ref, "check_margin", None)) else ref.check_implementation
        self.generate = ref.generate_input
        # From here on the process (and anything it starts) writes only inside the sandbox.
        note = landlock.restrict_writes(list(self.cfg.get("writable", [])))
        self.chan.send(type="sandbox", note="; ".join(x for x in (note, globals().get("_PRIVILEGES", "")) if x))
        path = self.cfg["candidate_path"]
        try:
            source = open(path, "rb").read()
            compile(source, "submission.py", "exec")
        except SyntaxError as exc:
            raise StageFailure(SYNTAX, f"line {exc.lineno}: {exc.msg}") from None
        except ValueError as exc:
            raise StageFailure(SYNTAX, f"not Python source: {exc}") from None
        try:
            module = importlib.import_module("submission")
        except BaseException as exc:  # noqa: BLE001 - SystemExit at import is the candidate's fault too
            cls = CRASH if isinstance(exc, SystemExit) else classify(exc)
            raise StageFailure(IMPORT if cls == EXCEPTION else cls, describe(exc)) from None
        kernel = getattr(module, "custom_kernel", None)
        if not callable(kernel):
            raise StageFailure(INTERFACE, "submission.py has no callable custom_kernel(data)")
        self.kernel = kernel

    def verify_guard(self, stage: str) -> None:
        if self.guard is None:
            return
        changed = self.guard.violations()
        if changed:
            raise StageFailure(GUARD, guard_mod.describe(changed, stage))

    # -- one case -------------------------------------------------------------------------
    def make(self, spec: dict[str, Any], repeat: int, slot: int) -> Any:
        args = dict(spec)
        args["seed"] = timing.input_seed(self.nonce, int(spec.get("seed", 0)), repeat, slot)
        return self.generate(**args)

    def call(self, data: Any) -> Any:
        try:
            return self.kernel(data)
        except BaseException as exc:  # noqa: BLE001
            cls = CRASH if isinstance(exc, (SystemExit, KeyboardInterrupt)) else classify(exc)
            raise StageFailure(cls, describe(exc)) from None

    def verify(self, spec: dict[str, Any], data: Any, out: Any, before: list[float]) -> float | None:
        """Check one output; its margin (fraction of the checker's tolerance used), if the task measures it."""
        ok, msg, margin = _check(self.check, data, out)
        if timing.fingerprint(data) != before:
            raise StageFailure(GUARD, f"{_label(spec)}: the checker's copy of the input changed during the call")
        if not ok:
            raise StageFailure(WRONG, f"{_label(spec)}: {msg}")
        return margin

    def test(self, spec: dict[str, Any], index: int, total: int) -> CaseResult:
        self.chan.send(type="case", kind="test", index=index, total=total, spec=spec)
        data = self.make(spec, repeat=-1, slot=0)
        before = timing.fingerprint(data)
        out = self.call(timing.clone_data(data))
        _sync(self.device)
        return CaseResult(kind="test", spec=spec, passed=True, margin=self.verify(spec, data, out, before))

    def bench(self, spec: dict[str, Any], index: int, total: int) -> CaseResult:
        self.chan.send(type="case", kind="benchmark", index=index, total=total, spec=spec)
        clock = timing.Clock(self.device)
        warm = self.make(spec, repeat=-2, slot=0)
        k = timing.inputs_per_repeat(timing.data_nbytes(warm))
        before = timing.fingerprint(warm)
        out = self.call(timing.clone_data(warm))
        clock.sync()
        margins = [self.verify(spec, warm, out, before)]
        del warm, out
        times: list[float] = []
        threads_before = threading.active_count()
        started = timing._perf_counter()
        repeat = 0
        while not timing.should_stop(times, self.policy, started):
            datas = [self.make(spec, repeat, j) for j in range(k)]
            prints = [timing.fingerprint(d) for d in datas]
            copies = [timing.clone_data(d) for d in datas]
            kernel_call = self.call
            device_s, host_s, tail_s, outs = clock.time(lambda: [kernel_call(c) for c in copies])
            if device_s > host_s * 1.05 + 1e-4:
                raise StageFailure(GUARD, f"{_label(spec)}: device time {device_s * 1e6:.1f} us exceeds the host "
                                          f"wall-clock bound {host_s * 1e6:.1f} us")
            if tail_s > clock.tail_limit(device_s):
                raise StageFailure(GUARD, f"{_label(spec)}: work kept running {tail_s * 1e3:.2f} ms after the timed "
                                          "region ended (side work not joined to the timed region)")
            if threading.active_count() > threads_before:
                raise StageFailure(GUARD, f"{_label(spec)}: the candidate left threads running after the timed "
                                          "region (work not finished inside it)")
            self.timed_s += device_s
            for j in self.checked_slots(k, repeat):
                margins.append(self.verify(spec, datas[j], outs[j], prints[j]))
            times.append(device_s / k)
            repeat += 1
            del datas, copies, outs
        s = timing.stats(times)
        profile = self.profile(spec) if self.mode == "profile" else None
        return CaseResult(kind="benchmark", spec=spec, passed=True, mean_us=s.mean * 1e6, std_us=s.std * 1e6,
                          stderr_us=s.stderr * 1e6, best_us=s.best * 1e6, worst_us=s.worst * 1e6, runs=s.runs,
                          per_call_inputs=k, profile=profile, margin=_worst(margins))

    def checked_slots(self, k: int, repeat: int) -> list[int]:
        if self.policy.check == "all" or k <= 2:
            return list(range(k))
        return sorted({0, k - 1, self.rng.randrange(k)})

    def profile(self, spec: dict[str, Any]) -> dict[str, Any]:
        from agent.harness.profiling import profile_calls
        datas = [self.make(spec, 10_000 + i, 0) for i in range(3)]
        return profile_calls(self.kernel, datas, self.device)


def _guarded_spaces(task_dir: str) -> tuple[dict[str, Any], set[str]]:
    """Namespaces whose names the candidate must not change, and those where it must not add one either."""
    root = os.path.realpath(task_dir) + os.sep
    task = {name: m for name, m in list(sys.modules.items())
            if os.path.realpath(getattr(m, "__file__", None) or "/").startswith(root)}
    me = sys.modules[__name__]
    harness = {"worker": me, "worker.Worker": Worker, "worker.Channel": Channel, "timing": timing,
               "timing.Clock": timing.Clock, "result": result, "guard": guard_mod, "guard.Guard": guard_mod.Guard}
    others = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.linalg": torch.linalg,
              "torch.nn.functional": torch.nn.functional, "torch.functional": torch.functional,
              "builtins": builtins, "math": math, "random": random, "random.Random": random.Random, "json": json,
              "hmac": hmac, "hashlib": hashlib, "threading": threading, "time": time}
    return {**task, **harness, **others}, set(task) | set(harness) | {"torch.Tensor"}


def _worst(margins: list[float | None]) -> float | None:
    measured = [m for m in margins if m is not None]
    return max(measured) if measured else None


def _size(spec: dict[str, Any]) -> int:
    return int(spec.get("batch", 1)) * int(spec.get("n", 1)) ** 2 if "n" in spec else sum(
        int(v) for v in spec.values() if isinstance(v, int))


def _label(spec: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in spec.items() if k != "seed")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def versions(device: torch.device) -> dict[str, str]:
    found = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton  # noqa: PLC0415 - optional
        found["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    if device.type == "cuda":
        found["cuda"] = str(torch.version.cuda)
    return found


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


def _warm_up() -> None:
    """Create the CUDA context while waiting for a candidate (a pre-started worker waits here)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        try:
            if torch.cuda.is_available():
                torch.zeros(1, device="cuda")
        except Exception:  # noqa: BLE001 - a broken GPU shows up, classified, in the evaluation itself
            pass


def _exit_with_parent() -> None:
    """End this worker when the agent that started it dies (kill -9): no orphan keeps the GPU busy.

    Polling getppid, not PR_SET_PDEATHSIG: that fires when the spawning *thread* exits, and a
    pre-started worker outlives the evaluation thread that started it.
    """
    parent = os.getppid()
    started = threading.Event()
    tid: list[int] = []

    def watch() -> None:
        tid.append(threading.get_native_id())
        started.set()
        while True:
            time.sleep(0.25)
            if os.getppid() != parent:
                os._exit(70)
    threading.Thread(target=watch, name="steer-parent-watch", daemon=True).start()
    started.wait()
    timing.HARNESS_THREADS = frozenset(tid)   # before the guard's snapshot, so replacing it is seen


def main() -> None:
    _exit_with_parent()
    _warm_up()
    cfg = json.loads(sys.stdin.read())
    chan = Channel(int(cfg["result_fd"]), bytes.fromhex(cfg.pop("key")))
    # The repository must not be importable by the candidate, nor reachable by relative path.
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd(), cfg.get("repo_root"))]
    worker = Worker(cfg, chan)
    chan.send(type="hello", device=device_name(worker.device), versions=versions(worker.device), pid=os.getpid())
    try:
        worker.run()
    except StageFailure as failure:
        chan.send(type="failure", error_class=failure.error_class, message=failure.message)
    except BaseException as exc:  # noqa: BLE001 - anything else escaping is still reported
        cls = CRASH if isinstance(exc, SystemExit) else classify(exc)
        chan.send(type="failure", error_class=cls, message=describe(exc))
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a candidate's atexit hooks or threads must not change the outcome.
    os._exit(0)


if __name__ == "__main__":
    main()
