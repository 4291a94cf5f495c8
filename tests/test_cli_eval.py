"""`steer eval` and `steer bench` as a user runs them: real subprocesses, exit codes, one-line errors."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def steer(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_eval_prints_a_table_and_exits_zero(small_qr_task):
    p = steer("eval", str(small_qr_task.baseline), "--task", str(small_qr_task.path), "--device", "cpu")
    assert p.returncode == 0, p.stderr
    assert "geomean" in p.stdout and "dense 4x16 c1" in p.stdout and "tests passed: 2" in p.stdout
    assert "of the checker's tolerance at most" in p.stdout


def test_eval_json_is_one_object(small_qr_task):
    p = steer("eval", str(small_qr_task.baseline), "--task", str(small_qr_task.path), "--device", "cpu", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["ok"] is True and d["geomean_us"] > 0 and d["device"].startswith("cpu")


def test_failing_candidate_exits_one(small_qr_task, candidate):
    bad = candidate("def custom_kernel(data):\n    raise ValueError('nope')\n")
    p = steer("eval", str(bad), "--task", str(small_qr_task.path), "--device", "cpu")
    assert p.returncode == 1
    assert "FAILED (exception) in stage smoke: ValueError: nope" in p.stdout


def test_bench_prints_speedups_against_the_baseline(small_qr_task, candidate):
    other = candidate("import torch\ndef custom_kernel(data):\n    return torch.geqrf(data)\n", name="mine.py")
    p = steer("bench", str(other), "--task", str(small_qr_task.path), "--device", "cpu")
    assert p.returncode == 0, p.stderr
    header = p.stdout.splitlines()[0]
    assert "geqrf" in header and "mine" in header
    assert "x)" in p.stdout.splitlines()[-1]  # the geomean row carries a speedup
    assert p.stdout.splitlines()[-2].startswith("tolerance used") and "%" in p.stdout.splitlines()[-2]


def one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def broken_task(tmp_path: Path, small_qr_task, edit) -> Path:
    d = tmp_path / "broken"
    shutil.copytree(small_qr_task.path, d)
    edit(d)
    return d


@pytest.mark.reliability
@pytest.mark.parametrize("edit, expect", [
    (lambda d: (d / "task.yml").write_text("tests: [\n  {batch: 1\n"), "not valid YAML"),
    (lambda d: (d / "task.yml").unlink(), "no task.yml"),
    (lambda d: (d / "reference.py").unlink(), "no reference.py"),
    (lambda d: (d / "reference.py").write_text("def generate_input(**k):\n    pass\n"),
     "does not define check_implementation"),
    (lambda d: (d / "reference.py").write_bytes(b"\x00\x01binary"), "reference.py"),
    (lambda d: (d / "task.yml").write_text("tests: 3\n"), "`tests` must be a list"),
    (lambda d: (d / "task.yml").write_text("- just\n- a list\n"), "must be a mapping"),
])
def test_malformed_task_gets_one_line_error(tmp_path, small_qr_task, edit, expect):
    d = broken_task(tmp_path, small_qr_task, edit)
    p = steer("eval", str(small_qr_task.baseline), "--task", str(d), "--device", "cpu")
    assert expect in one_line_error(p)


def test_bad_arguments_get_one_line_errors(small_qr_task, tmp_path):
    assert "no such file" in one_line_error(steer("eval", str(tmp_path / "missing.py"), "--device", "cpu"))
    assert "no such directory" in one_line_error(steer("eval", str(small_qr_task.baseline), "--task", "nope"))
    assert "--timeout must be positive" in one_line_error(
        steer("eval", str(small_qr_task.baseline), "--timeout", "-1", "--device", "cpu"))


def test_candidate_without_custom_kernel_exits_one_with_interface(small_qr_task, candidate):
    p = steer("eval", str(candidate("x = 1\n")), "--task", str(small_qr_task.path), "--device", "cpu", "--json")
    assert p.returncode == 1
    assert json.loads(p.stdout)["error_class"] == "interface"
