"""Pilot tests: the real app against a real session directory, events appended from another thread."""
from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Select, Static

from agent import events as ev
from agent.session import Session, read_inbox
from console.app import SteerApp
from console.demo import append_live, git_two_commits, write_demo
from console.digest import SeenStore
from console.screens.detail import DetailScreen
from console.screens.dialogs import ConfirmDialog, ForkDialog, QuitDialog
from console.screens.digest import DigestScreen
from console.screens.help import HelpScreen
from console.snapshot import screen_text
from console.testing import FIXED_NOW, settle, wait_for
from console.widgets.attempts import AttemptsLog
from console.widgets.beam import BeamTable
from console.widgets.chart import TimingChart


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


@pytest.fixture
def session(tmp_path: Path) -> Session:
    return write_demo(tmp_path / "sessions", "demo", attempts=12)


def make_app(session: Session, tmp_path: Path, **kw: object) -> SteerApp:
    kw.setdefault("digest", False)
    return SteerApp(session, clock=lambda: FIXED_NOW, seen=SeenStore(tmp_path / "seen.json"), **kw)  # type: ignore[arg-type]


def inbox(session: Session) -> list[dict]:
    return [r for r, _ in read_inbox(session)[0]]


def later(fn: object, delay: float = 0.2) -> threading.Thread:
    """Run `fn` in another thread, the way an agent appends while the console watches."""
    t = threading.Thread(target=lambda: (time.sleep(delay), fn()), daemon=True)  # type: ignore[operator]
    t.start()
    return t


async def test_chart_beam_and_log_follow_new_events(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        chart_version = app.model.versions["chart"]
        assert app.main.query_one(AttemptsLog).row_count == 12
        later(lambda: append_live(session, [
            ev.IterationStarted(iteration=13, branch="qr/wy-triton", parent_sha="p13"),
            ev.EvalFinished(iteration=13, branch="qr/wy-triton", ok=True, error_class=None, message="ok",
                            geomean_us=50_000.0),
            ev.AttemptCommitted(iteration=13, branch="qr/wy-triton", sha="c13", parent_sha="p13",
                                verdict="accepted", summary="block 64 -> 128 [live] [/oops", geomean_us=50_000.0,
                                speedup=2.34),
            ev.BranchCreated(branch="qr/live-fork", family="wy-triton", sha="c13", source="fork of qr/wy-triton"),
        ]))
        log = app.main.query_one(AttemptsLog)
        await wait_for(pilot, lambda: log.row_count == 13, what="the new attempt row")
        await wait_for(pilot, lambda: "qr/live-fork" in screen_text(app), what="the new branch")
        text = screen_text(app)
        assert str(log.get_row("13")[5]) == "block 64 -> 128 [live] [/oops" and log.cursor_row == 0
        assert "qr/live-fork" in text                      # beam table
        assert "50,000 µs 2.34×" in text                   # header best
        table = app.main.query_one(BeamTable)
        assert table.get_row("qr/wy-triton")[3] == "50,000"
        assert app.model.versions["chart"] > chart_version
        assert app.main.query_one(TimingChart)._key[0] == app.model.versions["chart"]   # redrawn
        await pilot.press("t")                              # x axis: wall time
        assert app.main.query_one(TimingChart).x_axis == "time"
        assert "x: hours" in screen_text(app)      # the live events are a year after the demo ones


async def test_prompt_appends_one_line_and_tracks_its_state(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        main = app.main
        # target and scope by keyboard: the selectors sit left of the prompt
        await pilot.press("s")
        await pilot.press("shift+tab", "shift+tab", "enter")        # the target selector, opened
        await wait_for(pilot, lambda: main.query_one("#steer-target", Select).expanded, what="target list")
        await pilot.press("down", "down", "enter")                  # all → first branch → second branch
        await pilot.press("tab", "enter", "down", "enter")          # scope: once → standing
        await pilot.press("tab")
        assert main.query_one("#steer-target", Select).value == "qr/cholqr"
        assert main.query_one("#steer-scope", Select).value == "standing"
        for ch in "try a wider panel":
            await pilot.press("space" if ch == " " else ch)
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(inbox(session)) == 1, what="one inbox line")
        await pilot.pause(0.3)
        lines = inbox(session)
        assert len(lines) == 1
        rec = lines[0]
        assert (rec["text"], rec["target"], rec["scope"]) == ("try a wider panel", "qr/cholqr", "standing")

        def status() -> str:
            row = next(r for r in app.model.steering_rows() if r.id == rec["id"])
            return row.detail

        await wait_for(pilot, lambda: "queued" in screen_text(app), what="queued")
        assert status() == "queued"
        later(lambda: append_live(session, [ev.SteeringReceived(id=rec["id"], text=rec["text"], target="qr/cholqr",
                                                                scope="standing")]), 0.05)
        await wait_for(pilot, lambda: status() == "seen", what="seen")
        await wait_for(pilot, lambda: "seen" in screen_text(app), what="seen on screen")
        later(lambda: append_live(session, [ev.SteeringApplied(id=rec["id"], iteration=13, branch="qr/cholqr")]),
              0.05)
        await wait_for(pilot, lambda: "used in #13" in screen_text(app), what="used in #13")
        assert len(inbox(session)) == 1
        # history: the prompt comes back with ↑
        await pilot.press("s", "up")
        assert main.query_one("#steer-input").value == "try a wider panel"  # type: ignore[attr-defined]


async def test_completion_of_commands_and_branches(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        box = app.main.query_one("#steer-input")
        await pilot.press("slash", "p", "a")              # "/" opens the prompt with the slash typed
        await wait_for(pilot, lambda: box._suggestion == "/pause ", what=f"command completion of {box.value!r}")  # type: ignore[attr-defined]
        await pilot.press("tab", "q", "r", "slash", "c")
        await wait_for(pilot, lambda: box._suggestion == "/pause qr/cholqr", what="branch completion")  # type: ignore[attr-defined]
        await pilot.press("tab", "enter")
        await wait_for(pilot, lambda: inbox(session), what="the command")
        assert inbox(session)[0]["text"] == "/pause qr/cholqr"


async def test_space_pauses_and_resumes_the_selected_branch(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        assert app.focused is app.main.query_one(BeamTable)
        await pilot.press("down", "space")                 # second row: qr/cholqr
        await wait_for(pilot, lambda: inbox(session), what="an inbox line")
        assert [r["text"] for r in inbox(session)] == ["/pause qr/cholqr"]
        later(lambda: append_live(session, [ev.BranchStateChanged(branch="qr/cholqr", state="paused")]), 0.05)
        await wait_for(pilot, lambda: app.model.state.branches["qr/cholqr"].state == "paused", what="paused")
        await pilot.press("space")
        await wait_for(pilot, lambda: len(inbox(session)) == 2, what="a second line")
        assert inbox(session)[1]["text"] == "/resume qr/cholqr"


async def test_fork_asks_a_name_and_kill_asks_to_confirm(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app)
        await pilot.press("f")
        assert isinstance(app.screen, ForkDialog)
        for ch in "qr/cholqr-wide":
            await pilot.press(ch if ch not in "/-" else {"/": "slash", "-": "minus"}[ch])
        await pilot.press("enter")
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")                              # declined: nothing sent
        await pilot.press("x", "y")
        await wait_for(pilot, lambda: len(inbox(session)) == 2, what="two lines")
        assert [r["text"] for r in inbox(session)] == ["/fork qr/geqrf-blocked qr/cholqr-wide",
                                                       "/kill qr/geqrf-blocked"]


async def test_enter_on_an_attempt_opens_its_diff(tmp_path: Path) -> None:
    session = write_demo(tmp_path / "sessions", "demo", attempts=4, results=True)
    parent, child = git_two_commits(session.repo)
    append_live(session, [
        ev.IterationStarted(iteration=5, branch="qr/cholqr", parent_sha=parent),
        ev.AttemptCommitted(iteration=5, branch="qr/cholqr", sha=child, parent_sha=parent, verdict="accepted",
                            summary="panel 32 -> 64, num_warps 4 -> 8", geomean_us=70_000.0, speedup=1.67),
    ])
    art = session.artifact_dir(5)
    (art / "eval.json").write_text(json.dumps({"ok": True, "stage": "bench", "cases": [
        {"kind": "benchmark", "spec": {"batch": 640, "n": 512}, "passed": True, "mean_us": 991.5, "runs": 3,
         "margin": 0.0314}]}))
    (art / "transcript.txt").write_text("SYSTEM: you tune kernels\nASSISTANT: widen the panel\n")
    app = make_app(session, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        app.main.query_one(AttemptsLog).focus()
        await pilot.press("enter")                          # the newest attempt: #5
        assert isinstance(app.screen, DetailScreen)
        await wait_for(pilot, lambda: "+CONFIG = {'panel': 64" in screen_text(app), what="the diff")
        text = screen_text(app)
        assert "-CONFIG = {'panel': 32, 'num_warps': 4}" in text and "#5 qr/cholqr" in text
        await pilot.press("2")
        await wait_for(pilot, lambda: "batch=640 n=512" in screen_text(app), what="the cases table")
        assert "991.5" in screen_text(app) and "3.1%" in screen_text(app)   # the tolerance the outputs used
        await pilot.press("4")
        await wait_for(pilot, lambda: "widen the panel" in screen_text(app), what="the transcript")
        await pilot.press("escape")
        assert app.screen is app.main
        await pilot.press("d")                              # d opens the same detail
        assert isinstance(app.screen, DetailScreen)


async def test_digest_lists_what_happened_since_the_last_look(session: Session, tmp_path: Path) -> None:
    SeenStore(tmp_path / "seen.json").save(session.dir, 5)
    app = make_app(session, tmp_path, digest=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        assert isinstance(app.screen, DigestScreen)
        text = screen_text(app)
        assert "Since you last looked" in text and "12 attempts" in text
        assert "new best" in text and "Steering" in text and "used in #4" in text
        await pilot.press("escape")
        assert app.screen is app.main
    # the next look starts after everything this one showed
    assert SeenStore(tmp_path / "seen.json").last_seen(session.dir) == app.model.state.last_seq


async def test_deleted_session_shows_a_message_not_a_crash(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        shutil.rmtree(session.dir)
        await wait_for(pilot, lambda: "was deleted" in screen_text(app), what="the message")
        assert app.main.query_one("#gone", Static).has_class("shown")
        await pilot.press("space")                          # steering is refused, nothing crashes
        await pilot.pause(0.2)
        assert app.is_running
        await pilot.press("q")
    assert not app.is_running


async def test_unknown_and_garbage_lines_are_ignored(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        with open(session.events_path, "a") as f:
            f.write(json.dumps({"seq": 9999, "ts": 2e9, "type": "warp_drive_engaged", "speed": 9}) + "\n{oops\n")
        append_live(session, [ev.ErrorEvent(where="harness", message="after the unknown ones")])
        await wait_for(pilot, lambda: "after the unknown ones" in screen_text(app), what="the error line")
        assert app.is_running


async def test_help_palette_and_filter(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "/fork B[@ITER|@SHA] NAME" in screen_text(app)
        await pilot.press("escape")
        await pilot.press("b")                              # log: only the selected branch
        log = app.main.query_one(AttemptsLog)
        assert log.branch_filter == "qr/geqrf-blocked" and "attempts · qr/geqrf-blocked" in str(log.border_title)
        await pilot.press("b")
        assert log.branch_filter is None
        await pilot.press("ctrl+p")
        for ch in "#7":
            await pilot.press(ch if ch != "#" else "number_sign")
        await wait_for(pilot, lambda: "Open attempt #7" in screen_text(app), what="the palette hit")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail")
        assert "#7 " in screen_text(app)


async def test_run_mode_quit_asks_stop_or_keep(session: Session, tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def runner(stop: threading.Event, abort: threading.Event) -> str:
        seen["started"] = True
        stop.wait(30)
        seen["abort"] = abort.is_set()
        return "handoff" if seen.get("handoff") else "stop"

    def handoff() -> int:
        seen["handoff"] = True
        return 4242

    app = make_app(session, tmp_path, mode="run", runner=runner, handoff=handoff)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app)
        await wait_for(pilot, lambda: seen.get("started"), what="the agent thread")
        await pilot.press("q")
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("escape")                         # cancel: still running
        assert app.is_running and app.agent_running()
        await pilot.press("q", "k")                         # keep: hand over, then leave
        await wait_for(pilot, lambda: not app.is_running, what="the app to exit")
    assert seen["handoff"] is True and app.return_value == "handoff"
    assert seen["abort"] is False                           # a quick agent was not interrupted


async def test_run_mode_stop(session: Session, tmp_path: Path) -> None:
    stopped = threading.Event()

    def runner(stop: threading.Event, abort: threading.Event) -> str:
        stop.wait(30)
        stopped.set()
        return "stop"

    app = make_app(session, tmp_path, mode="run", runner=runner, handoff=lambda: 1)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("q", "s")
        await wait_for(pilot, lambda: not app.is_running, what="the app to exit")
    assert stopped.is_set() and app.return_value == "stop"


async def test_alerts_ring_and_notify_unless_switched_off(session: Session, tmp_path: Path) -> None:
    app = make_app(session, tmp_path)
    rung: list[int] = []
    app.bell = lambda: rung.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot, app)
        append_live(session, [ev.PlateauDetected(branch="qr/cholqr", attempts_since_gain=9, minutes_since_gain=40)])
        await wait_for(pilot, lambda: rung, what="the bell")
        assert any("Plateau" in (n.title or "") for n in app._notifications)
        await pilot.press("a")                              # alerts off
        append_live(session, [ev.PlateauDetected(branch="qr/wy-triton", attempts_since_gain=9, minutes_since_gain=40)])
        await wait_for(pilot, lambda: app.model.state.branches["qr/wy-triton"].plateau, what="the plateau")
        await pilot.pause(0.2)
        assert len(rung) == 1


REAL_RUN = Path(__file__).resolve().parent.parent / "docs" / "h200" / "tune_run_events.jsonl"


@pytest.mark.skipif(not REAL_RUN.exists(), reason="the recorded H200 run is not in this checkout")
async def test_a_recorded_h200_run_renders(tmp_path: Path) -> None:
    from agent.session import create_session
    session = create_session(tmp_path / "sessions", "h200", {"task": "qr"})
    shutil.copy(REAL_RUN, session.events_path)
    app = make_app(session, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        text = screen_text(app)
        assert "best 3,837 µs 30.40×" in text and "#17" in text and "qr/superpanel" in text
        assert "✗ unfinished" in text                       # #17 never committed: the agent died
        app.main.query_one(AttemptsLog).focus()
        await pilot.press("down", "enter")                  # #16: no repo here, the detail says so
        assert isinstance(app.screen, DetailScreen)
        await wait_for(pilot, lambda: "no git repository" in screen_text(app), what="the note")
