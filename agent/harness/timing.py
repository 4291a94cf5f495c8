"""GPU MODE's timing method: fresh inputs per repeat, L2 flushed, CUDA events, stop on low standard error.

Runs inside the worker process. The clock functions are captured at import, before any
candidate code runs, so a candidate that replaces them does not change what is measured;
guard.py reports that it tried.
"""
from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

CPU_TAIL_WINDOW_S = 1e-3     # how long other threads are watched for CPU use after a CPU timed region
CPU_TAIL_LIMIT_S = 2.0       # stop watching after this; the work is reported as still running
HARNESS_THREADS: frozenset[int] = frozenset()   # native ids of the worker's own threads (they wake at any time)

L2_FLUSH_BYTES = 256 * 1024 * 1024
INPUT_BUDGET_BYTES = 256 * 1024 * 1024
MAX_INPUTS_PER_REPEAT = 50


@dataclass(frozen=True)
class Policy:
    """When a case's repeats stop: the first rule that holds."""
    min_runs: int
    max_runs: int
    rel_stderr: float        # stop once stderr/mean is below this, after min_runs and min_time_s
    min_time_s: float
    max_kernel_s: float      # mean * runs above this stops
    max_case_s: float        # wall time for the case, inputs and checks included
    check: str = "all"       # "all": check every output; "sample": first, last and a random few


POLICIES = {
    "quick": Policy(min_runs=5, max_runs=30, rel_stderr=0.003, min_time_s=0.02, max_kernel_s=0.3, max_case_s=1.5,
                    check="sample"),
    "full": Policy(min_runs=10, max_runs=200, rel_stderr=0.001, min_time_s=0.1, max_kernel_s=10.0, max_case_s=120.0),
    "leaderboard": Policy(min_runs=10, max_runs=1000, rel_stderr=0.001, min_time_s=0.1, max_kernel_s=30.0,
                          max_case_s=120.0),
    "profile": Policy(min_runs=5, max_runs=50, rel_stderr=0.003, min_time_s=0.02, max_kernel_s=0.5, max_case_s=3.0,
                      check="sample"),
}

# Captured before any candidate is imported.
_perf_counter = time.perf_counter
_sleep = time.sleep
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_event_sync = torch.cuda.Event.synchronize
_cuda_sync = torch.cuda.synchronize


def watched() -> dict[str, Any]:
    """The objects a candidate must not replace; compared by identity after it ran."""
    return {
        "time.perf_counter": lambda: time.perf_counter,
        "torch.cuda.Event": lambda: torch.cuda.Event,
        "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.synchronize": lambda: torch.cuda.Event.synchronize,
        "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
    }


def input_seed(nonce: int, spec_seed: int, repeat: int, slot: int) -> int:
    """A seed no other repeat, slot, case or invocation uses (nonce is fresh per evaluation)."""
    digest = hashlib.blake2b(f"{nonce}:{spec_seed}:{repeat}:{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 62) - 1)


def inputs_per_repeat(nbytes: int) -> int:
    return max(1, min(MAX_INPUTS_PER_REPEAT, INPUT_BUDGET_BYTES // max(1, nbytes)))


def data_nbytes(data: Any) -> int:
    if isinstance(data, torch.Tensor):
        return data.numel() * data.element_size()
    if isinstance(data, (tuple, list)):
        return sum(data_nbytes(d) for d in data)
    if isinstance(data, dict):
        return sum(data_nbytes(d) for d in data.values())
    return 0


def clone_data(data: Any) -> Any:
    """The candidate gets a clone; the checker keeps the original."""
    if isinstance(data, torch.Tensor):
        return data.clone()
    if isinstance(data, tuple):
        return tuple(clone_data(d) for d in data)
    if isinstance(data, list):
        return [clone_data(d) for d in data]
    if isinstance(data, dict):
        return {k: clone_data(v) for k, v in data.items()}
    return data


def fingerprint(data: Any) -> list[float]:
    """A cheap content summary, to notice a candidate that reached the checker's copy and changed it."""
    if isinstance(data, torch.Tensor):
        flat = data.detach().reshape(-1)
        if flat.numel() == 0:
            return [0.0]
        f = flat.double()
        return [float(f.sum()), float((f * f).sum()), float(f[:: max(1, flat.numel() // 97)].sum())]
    if isinstance(data, (tuple, list)):
        return [x for d in data for x in fingerprint(d)]
    if isinstance(data, dict):
        return [x for d in data.values() for x in fingerprint(d)]
    return []


@dataclass
class Stats:
    mean: float
    std: float
    stderr: float
    best: float
    worst: float
    runs: int


def stats(times_s: list[float]) -> Stats:
    n = len(times_s)
    mean = sum(times_s) / n
    var = sum((t - mean) ** 2 for t in times_s) / (n - 1) if n > 1 else 0.0
    std = math.sqrt(var)
    return Stats(mean=mean, std=std, stderr=std / math.sqrt(n), best=min(times_s), worst=max(times_s), runs=n)


def should_stop(times_s: list[float], policy: Policy, started: float) -> bool:
    runs = len(times_s)
    if runs >= policy.max_runs:
        return True
    elapsed = _perf_counter() - started
    if elapsed > policy.max_case_s:
        return True
    if runs < 1:
        return False
    s = stats(times_s)
    if s.mean * runs > policy.max_kernel_s:
        return True
    return runs >= policy.min_runs and elapsed > policy.min_time_s and s.stderr < policy.rel_stderr * s.mean


class Clock:
    """Times k calls: CUDA events with the L2 flushed first, or the host clock on the CPU.

    Returns (device seconds for the k calls, host seconds for the same region, seconds the
    device still had queued after the end event completed).
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device) if self.cuda else None

    def time(self, run: Callable[[], Any]) -> tuple[float, float, float, Any]:
        if not self.cuda:
            t0 = _perf_counter()
            out = run()
            t1 = _perf_counter()
            return t1 - t0, t1 - t0, cpu_tail(), out
        _cuda_sync()
        self._flush.fill_(0)
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        h0 = _perf_counter()
        _event_record(start)
        out = run()
        _event_record(end)
        _event_sync(end)
        h1 = _perf_counter()
        _cuda_sync()  # anything still queued now ran outside the timed region
        h2 = _perf_counter()
        return _event_elapsed(start, end) / 1e3, h1 - h0, h2 - h1, out

    def sync(self) -> None:
        if self.cuda:
            _cuda_sync()

    def tail_limit(self, device_s: float) -> float:
        """The longest tail that is noise: event synchronisation on the GPU; on the CPU, where nothing
        legitimate runs after the region, less than one watch window."""
        return max(2e-3, 0.25 * device_s) if self.cuda else 0.5 * CPU_TAIL_WINDOW_S


def cpu_tail() -> float:
    """Seconds other threads of this process kept running after the timed region (the CPU's `synchronize`).

    A kernel that hands its work to a thread pool and returns leaves that pool running; a
    joined one leaves it asleep. Thread states are read from /proc, not CPU clocks: with
    RLIMIT_CPU set the process clock is only brought up to date at scheduler ticks.
    """
    start = _perf_counter()
    quiet_since: float | None = None
    last_busy: float | None = None
    while True:
        busy = _others_running()
        now = _perf_counter()
        if busy:
            quiet_since, last_busy = None, now
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= CPU_TAIL_WINDOW_S:
            # Only a thread seen running counts: on a loaded machine the watcher itself can be
            # descheduled for milliseconds, which is no work of the candidate's.
            return 0.0 if last_busy is None else last_busy - start
        if now - start > CPU_TAIL_LIMIT_S:
            return now - start
        _sleep(CPU_TAIL_WINDOW_S / 10)


def _others_running() -> bool:
    """Whether a thread of this process other than the harness's own is running or runnable."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return False
    for tid in tids:
        if int(tid) in HARNESS_THREADS or int(tid) == threading.get_native_id():
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == b"R":
            return True
    return False
