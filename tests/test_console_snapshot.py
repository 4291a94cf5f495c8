"""Text snapshots of the main screen (characters only), made deterministic: a fixed clock, UTC,
a generated session, no cursor blink. `STEER_UPDATE_SNAPSHOTS=1 pytest tests/test_console_snapshot.py`
rewrites them after an intended change; review the diff like code."""
from __future__ import annotations

import difflib
import os
import time
from pathlib import Path

import pytest

from console.app import SteerApp
from console.demo import write_demo
from console.digest import SeenStore
from console.snapshot import screen_text
from console.testing import FIXED_NOW, settle

SNAPSHOTS = Path(__file__).parent / "snapshots"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


async def render(tmp_path: Path, size: tuple[int, int], resize_via: tuple[int, int] | None = None) -> str:
    session = write_demo(tmp_path / "sessions", "demo", attempts=40)
    app = SteerApp(session, clock=lambda: FIXED_NOW, digest=False, seen=SeenStore(tmp_path / "seen.json"))
    async with app.run_test(size=resize_via or size) as pilot:
        await settle(pilot, app)
        if resize_via:
            await pilot.resize_terminal(*size)
            await pilot.pause(0.3)
        return screen_text(app)


def check(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("STEER_UPDATE_SNAPSHOTS") or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        if not os.environ.get("STEER_UPDATE_SNAPSHOTS"):
            pytest.fail(f"{path} did not exist; written now: review and commit it")
        return
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "stored", "now"))
        pytest.fail(f"{name} changed (STEER_UPDATE_SNAPSHOTS=1 to accept):\n{diff}")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_main_screen_snapshot(tmp_path: Path, size: tuple[int, int]) -> None:
    text = await render(tmp_path, size)
    assert len(text.splitlines()) == size[1]
    check(f"console_main_{size[0]}x{size[1]}.txt", text)


async def test_no_color_and_256_colors_render_the_same_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    text = await render(tmp_path, (80, 24))
    assert text == (SNAPSHOTS / "console_main_80x24.txt").read_text()


async def test_resizing_keeps_the_layout(tmp_path: Path) -> None:
    # from 200x60 (wide) down to 80x24: the same screen as a fresh 80x24 start
    text = await render(tmp_path, (80, 24), resize_via=(200, 60))
    assert text == (SNAPSHOTS / "console_main_80x24.txt").read_text()


@pytest.mark.parametrize("size", [(200, 60), (60, 18), (30, 10)])
async def test_other_sizes_render_without_error(tmp_path: Path, size: tuple[int, int]) -> None:
    text = await render(tmp_path, size)
    assert len(text.splitlines()) == size[1]
    if size[0] >= 80:
        assert "timing · log µs" in text and "best 77,390 µs 1.51×" in text and "qr/wy-triton" in text
