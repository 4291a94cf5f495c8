"""Shared by the candidate and cheat scenarios: run one candidate through the real harness on the small qr task."""
from __future__ import annotations

import textwrap
import time
from pathlib import Path

from agent.harness.result import EvalResult
from agent.harness.runner import EvalOptions, evaluate
from agent.harness.task import Task

LIMIT = 8.0  # seconds per stage; generous for a loaded 2-core CI box

GEQRF = """
import torch
def custom_kernel(data):
    return torch.geqrf(data)
"""


def run(path: Path, task: Task, **kw) -> tuple[EvalResult, float]:
    started = time.monotonic()
    result = evaluate(path, task, EvalOptions(**{"device": "cpu", "stage_timeout": LIMIT, **kw}))
    return result, time.monotonic() - started


def cheat_caught(result: EvalResult, *classes: str) -> bool:
    """A cheat is caught when the evaluation failed with one of the expected classes."""
    return not result.ok and result.error_class in classes


def source(*parts: str) -> str:
    """Candidate source from parts that may each be indented differently."""
    return "\n".join(textwrap.dedent(p) for p in parts)
