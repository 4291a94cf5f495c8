"""`profile` mode: what torch.profiler says about a few calls of one case (worker side).

The numbers answer the first question about a slow kernel at these sizes: is it launch-bound?
Many launches per call and a low GPU-busy share say yes.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile

from agent.harness.timing import _perf_counter, clone_data

TOP_KERNELS = 6


def _is_device_event(evt: Any) -> bool:
    kind = getattr(evt, "device_type", None)
    return kind is not None and kind != torch.autograd.DeviceType.CPU


def profile_calls(kernel: Callable, datas: list[Any], device: torch.device) -> dict[str, Any]:
    copies = [clone_data(d) for d in datas]
    kernel(clone_data(datas[0]))  # warm: compilation and graph capture stay out of the trace
    if device.type == "cuda":
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        t0 = _perf_counter()
        for c in copies:
            kernel(c)
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall_us = (_perf_counter() - t0) * 1e6
    calls = len(copies)
    by_name: dict[str, list[float]] = defaultdict(list)
    busy_us = 0.0
    launches = 0
    for evt in prof.events():
        if device.type == "cuda":
            if not _is_device_event(evt):
                continue
            dur = float(getattr(evt, "device_time", 0.0) or getattr(evt, "cuda_time", 0.0) or 0.0)
        else:
            if evt.cpu_parent is not None:
                continue
            dur = float(evt.cpu_time_total)
        launches += 1
        busy_us += dur
        by_name[evt.name].append(dur)
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:TOP_KERNELS]
    return {
        "calls": calls,
        "launches_per_call": launches / calls,
        "wall_us_per_call": wall_us / calls,
        "busy_share": min(1.0, busy_us / wall_us) if wall_us > 0 else None,
        "top": [{"name": name[:120], "count_per_call": len(d) / calls, "us_per_call": sum(d) / calls}
                for name, d in top],
    }
