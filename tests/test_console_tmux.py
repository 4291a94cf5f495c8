"""The console inside tmux: scripts/tmux_attach.py captured `steer attach` in a real tmux pane into
docs/console/tmux_attach.txt. The stored capture must match what the app renders now; with tmux
installed, a fresh capture (with NO_COLOR and TERM=xterm-256color) must match it too."""
from __future__ import annotations

import importlib.util
import shutil
import time
from pathlib import Path

import pytest

from console.app import SteerApp
from console.demo import write_demo
from console.digest import SeenStore
from console.snapshot import screen_text
from console.testing import settle

REPO = Path(__file__).resolve().parent.parent
STORED = REPO / "docs" / "console" / "tmux_attach.txt"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def test_stored_capture_shows_the_console() -> None:
    text = STORED.read_text()
    lines = text.splitlines()
    assert len(lines) == 40 and max(len(line) for line in lines) <= 120
    for needle in ("demo │ task qr │ tune │ NVIDIA H200", "best 77,390 µs 1.51×", "qr/cholqr", "beam",
                   "timing · log µs", "attempts · all branches · 40", "steering", "used in #13",
                   "rejected: unknown b", "activity", "q Quit", "^p palette"):
        assert needle in text, needle


async def test_stored_capture_matches_a_fresh_render(tmp_path: Path) -> None:
    session = write_demo(tmp_path / "sessions", "demo", attempts=40)
    app = SteerApp(session, digest=False, seen=SeenStore(tmp_path / "seen.json"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        fresh = screen_text(app)
    assert fresh == STORED.read_text(), "the app renders differently now: run scripts/tmux_attach.py and review"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_live_tmux_capture_matches_the_stored_one() -> None:
    spec = importlib.util.spec_from_file_location("tmux_attach", REPO / "scripts" / "tmux_attach.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = script.capture(120, 40, {"NO_COLOR": "1", "TERM": "xterm-256color"})
    assert text == STORED.read_text()
