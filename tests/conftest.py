"""Shared fixtures: the bundled qr task, a small copy of it for fast harness runs, candidate files."""
from __future__ import annotations

import importlib
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
QR_DIR = ROOT / "kernels" / "qr"


@pytest.fixture(scope="session")
def qr_reference():
    """kernels/qr/reference.py imported the way GPU MODE does: its directory on sys.path."""
    if str(QR_DIR) not in sys.path:
        sys.path.insert(0, str(QR_DIR))
    return importlib.import_module("reference")


@pytest.fixture
def small_qr_task(tmp_path: Path):
    """The qr task with two tests and one benchmark, so a harness run takes seconds on a CPU."""
    from agent.harness.task import load_task

    d = tmp_path / "qr_small"
    d.mkdir()
    for f in QR_DIR.iterdir():
        if f.is_file():
            shutil.copy(f, d / f.name)
    shutil.copytree(QR_DIR / "candidates", d / "candidates")
    doc = yaml.safe_load((QR_DIR / "task.yml").read_text())
    small = [{"batch": 2, "n": 16, "cond": 1, "seed": 7, "case": "dense"},
             {"batch": 3, "n": 24, "cond": 0, "seed": 8, "case": "mixed"}]
    doc["steer"]["cpu_tests"] = small
    doc["steer"]["cpu_benchmarks"] = [{"batch": 4, "n": 16, "cond": 1, "seed": 9, "case": "dense"}]
    (d / "task.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_task(d)


@pytest.fixture
def candidate(tmp_path: Path):
    """Write a candidate file from (dedented) source; returns its path."""
    counter = iter(range(1000))

    def write(source: str, name: str | None = None) -> Path:
        path = tmp_path / (name or f"cand{next(counter)}.py")
        path.write_text(textwrap.dedent(source))
        return path
    return write
