"""The main screen: header, beam table, timing chart, attempts log, steering pane, activity."""
from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from console.model import ConsoleModel
from console.palette import MainCommands
from console.widgets.activity import ActivityPane
from console.widgets.attempts import AttemptsLog
from console.widgets.beam import BeamTable
from console.widgets.chart import TimingChart
from console.widgets.header import SessionHeader
from console.widgets.steering import SteeringInput, SteeringPane

if TYPE_CHECKING:
    from console.app import SteerApp


class MainScreen(Screen[None]):
    CSS_PATH = "../main.tcss"  # console/*.tcss: shipped as package data
    COMMANDS = {MainCommands}
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]
    AUTO_FOCUS = "#beam"
    BINDINGS = [
        Binding("q", "app.request_quit", "Quit", id="quit", tooltip="Quit the console"),
        Binding("question_mark,f1", "help", "Help", id="help", key_display="?",
                tooltip="Keys and steering commands"),
        Binding("s", "focus_steering", "Steer", id="steer", tooltip="Type a steering prompt"),
        Binding("slash", "focus_steering('/')", "Command", id="command", show=False,
                tooltip="Type a slash command"),
        Binding("space", "toggle_pause", "Pause", id="pause", tooltip="Pause or resume the selected branch"),
        Binding("f", "fork", "Fork", id="fork", tooltip="Fork the selected branch (asks for a name)"),
        Binding("x", "kill", "Kill", id="kill", tooltip="Kill the selected branch (asks to confirm)"),
        Binding("d", "detail", "Detail", id="detail", tooltip="Open the selected attempt"),
        Binding("t", "toggle_axis", "Axis", id="axis", tooltip="Chart x axis: iterations or wall time"),
        Binding("b", "filter_branch", "Filter", id="filter", show=False,
                tooltip="Attempts log: only the selected branch, or all"),
        Binding("a", "toggle_alerts", "Alerts", id="alerts", show=False, tooltip="Bell and notifications on/off"),
        Binding("g", "digest", "Digest", id="digest", show=False, tooltip="What happened since you last looked"),
    ]

    @property
    def steer_app(self) -> "SteerApp":
        return self.app  # type: ignore[return-value]

    @property
    def model(self) -> ConsoleModel:
        return self.steer_app.model

    def compose(self) -> ComposeResult:
        yield SessionHeader(id="header")
        yield Static(id="gone")
        with Grid(id="body"):
            yield BeamTable(id="beam")
            yield TimingChart(id="chart")
            yield AttemptsLog(id="attempts")
            yield SteeringPane(lambda: self.model, id="steering")
            yield ActivityPane(id="activity")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#beam").border_title = "beam"
        self.query_one("#steering").border_title = "steering"
        self.query_one("#activity").border_title = "activity"

    # -- painting ---------------------------------------------------------------------------------
    def refresh_panels(self, now: float) -> None:
        model = self.model
        with self.app.batch_update():
            self.query_one(SessionHeader).show(model, now)
            self.query_one(BeamTable).show(model)
            self.query_one(TimingChart).show(model)
            self.query_one(AttemptsLog).show(model)
            self.query_one(SteeringPane).show(model)
            self.query_one(ActivityPane).show(model)
            gone = self.query_one("#gone", Static)
            if model.gone and not gone.has_class("shown"):
                gone.update(f"✗ {model.gone}. The console shows the last state it read; steering is off. q quits.")
                gone.add_class("shown")

    # -- selection helpers ----------------------------------------------------------------------------
    def selected_branch(self) -> str | None:
        branch = self.query_one(BeamTable).selected_branch
        if branch is None:
            self.notify("no branch selected", severity="warning")
        return branch

    @on(DataTable.RowSelected, "#beam")
    def filter_from_beam(self, event: DataTable.RowSelected) -> None:
        self.action_filter_branch()

    @on(DataTable.RowSelected, "#attempts")
    def open_from_log(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.open_detail(int(event.row_key.value))

    @on(SteeringPane.Submitted)
    def submit_prompt(self, event: SteeringPane.Submitted) -> None:
        self.steer_app.send_steering(event.text, event.target, event.scope)

    # -- actions ----------------------------------------------------------------------------------------
    def send(self, text: str) -> None:
        self.steer_app.send_steering(text, None, "once")

    def action_toggle_pause(self) -> None:
        branch = self.selected_branch()
        if branch is None:
            return
        b = self.model.state.branches.get(branch)
        if b is not None and b.state == "killed":
            self.notify(f"{branch} is killed; fork it to continue its line", severity="warning")
            return
        self.send(f"/{'resume' if b is not None and b.state == 'paused' else 'pause'} {branch}")

    def action_fork(self) -> None:
        branch = self.selected_branch()
        if branch is not None:
            self.fork(branch)

    def fork(self, branch: str) -> None:
        def done(name: str | None) -> None:
            if name:
                self.send(f"/fork {branch} {name}")
        from console.screens.dialogs import ForkDialog
        self.app.push_screen(ForkDialog(branch), done)

    def action_kill(self) -> None:
        branch = self.selected_branch()
        if branch is not None:
            self.kill(branch)

    def kill(self, branch: str) -> None:
        def done(yes: bool | None) -> None:
            if yes:
                self.send(f"/kill {branch}")
        from console.screens.dialogs import ConfirmDialog
        self.app.push_screen(ConfirmDialog(f"Kill branch {branch}? It is never scheduled again."), done)

    def action_focus_steering(self, start: str = "") -> None:
        box = self.query_one(SteeringInput)
        box.focus()
        if start and not box.value:
            box.value = start
            box.cursor_position = len(start)

    def action_detail(self) -> None:
        iteration = self.query_one(AttemptsLog).selected_iteration
        if iteration is None:
            self.notify("no attempt selected", severity="warning")
            return
        self.open_detail(iteration)

    def open_detail(self, iteration: int) -> None:
        attempt = self.model.state.attempt(iteration)
        if attempt is None:
            self.notify(f"no attempt #{iteration}", severity="warning")
            return
        from console.screens.detail import DetailScreen   # the other screens load when first opened
        self.app.push_screen(DetailScreen(self.steer_app.session, attempt, self.model.state.baseline_us))

    def action_toggle_axis(self) -> None:
        chart = self.query_one(TimingChart)
        chart.x_axis = "time" if chart.x_axis == "iteration" else "iteration"

    def action_filter_branch(self) -> None:
        log = self.query_one(AttemptsLog)
        branch = self.query_one(BeamTable).selected_branch
        self.set_log_filter(None if log.branch_filter == branch else branch)

    def set_log_filter(self, branch: str | None) -> None:
        log = self.query_one(AttemptsLog)
        log.branch_filter = branch
        log.show(self.model, force=True)

    def action_toggle_alerts(self) -> None:
        app = self.steer_app
        app.alerts = not app.alerts
        self.notify(f"alerts {'on' if app.alerts else 'off'}")

    def action_digest(self) -> None:
        digest = self.model.digest
        if digest is None or digest.empty:
            self.notify("nothing new since you last looked")
            return
        from console.screens.digest import DigestScreen
        self.app.push_screen(DigestScreen(digest))

    def action_help(self) -> None:
        from console.screens.help import HelpScreen
        self.app.push_screen(HelpScreen())

    def key_escape(self) -> None:
        if isinstance(self.focused, SteeringInput):
            self.query_one(BeamTable).focus()
