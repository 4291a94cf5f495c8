"""`steer attach` / `steer report` / `steer run` entry points, and the import layering."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from console import cli
from console.demo import write_demo

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def test_attach_unknown_session_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_demo(tmp_path, "known", attempts=2)
    assert cli.main(["attach", "nope", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("steer: no session 'nope'") and "known" in err and err.count("\n") == 1
    assert cli.main(["attach", "--root", str(tmp_path / "empty")]) == 2


def test_report_writes_a_png_and_a_markdown_summary(tmp_path: Path) -> None:
    write_demo(tmp_path, "demo", attempts=30)
    out = tmp_path / "out" / "run.png"
    assert cli.main(["report", "demo", "-o", str(out), "--root", str(tmp_path)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# Steer session demo") and "![timing](run.png)" in md
    assert "| qr/cholqr | cholqr |" in md and "`try a larger panel width on cholqr` → qr/cholqr, once: used in #10" in md
    assert "rejected: unknown branch qr/nope" in md and "## Errors (1)" in md


def test_parser_has_the_console_commands() -> None:
    from agent import cli as agent_cli
    parser = agent_cli.build_parser()
    cli.add_console_commands(parser)
    commands = set(parser.steer_commands.choices)  # type: ignore[attr-defined]
    assert {"attach", "report", "eval", "bench"} <= commands


def test_console_run_needs_a_terminal(tmp_path: Path) -> None:
    # plain `steer` (= `steer run`) with no terminal: a clear line, not a broken screen
    out = subprocess.run([sys.executable, "-m", "console.cli"], cwd=REPO, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "STEER_HOME": str(tmp_path),
                                                        "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.returncode == 2 and "needs a terminal" in out.stderr


def test_textual_matplotlib_and_gitpython_load_only_when_needed() -> None:
    code = ("import sys, console.cli, console.model, console.tail, console.backlog, console.digest, console.alerts;"
            "print(sorted(m for m in ('textual', 'matplotlib', 'plotext', 'git') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_agent_never_imports_the_ui() -> None:
    for path in (REPO / "agent").rglob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and len(words) > 1:
                root = words[1].split(".")[0]
                assert root not in ("textual", "console", "textual_plotext", "plotext"), f"{path}: {line}"
