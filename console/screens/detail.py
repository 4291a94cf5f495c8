"""The attempt detail (Enter on an attempt): diff against its parent, per-case results,
errors and stderr, and the proposer transcript. Loaded in a thread; nothing blocks the UI."""
from __future__ import annotations

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from agent.harness.result import margin_text
from agent.session import Session
from agent.state import Attempt
from console import fmt
from console.attempt_data import AttemptDetail, load_detail, spec_text

TABS = ("diff", "cases", "errors", "transcript")


class DetailScreen(Screen[None]):
    CSS_PATH = "../detail.tcss"  # console/*.tcss: shipped as package data
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="detail-back", tooltip="Back to the main screen"),
        Binding("1", "tab('diff')", "Diff", id="detail-diff", tooltip="The change against the parent commit"),
        Binding("2", "tab('cases')", "Cases", id="detail-cases", tooltip="Per-case results"),
        Binding("3", "tab('errors')", "Errors", id="detail-errors", tooltip="Error message and stderr tail"),
        Binding("4", "tab('transcript')", "Transcript", id="detail-transcript", tooltip="The proposer's transcript"),
    ]

    def __init__(self, session: Session, attempt: Attempt, baseline_us: float | None) -> None:
        super().__init__()
        self.session = session
        self.attempt = attempt
        self.baseline_us = baseline_us

    def compose(self) -> ComposeResult:
        a = self.attempt
        title = Text(no_wrap=True, overflow="ellipsis")
        title.append(f"#{a.iteration} {a.branch}  ", style="bold")
        title.append(f"{fmt.VERDICT_MARK.get(a.verdict, '?')} {a.verdict}  {fmt.us(a.geomean_us)} µs "
                     f"{fmt.speedup(a.speedup)}  {a.sha[:10] or 'no commit'} ← {a.parent_sha[:10] or '?'}")
        yield Static(title, id="detail-title")
        yield Static(Text(a.summary or a.message or "", no_wrap=True, overflow="ellipsis"), id="detail-summary")
        with TabbedContent(id="detail-tabs", initial="diff"):
            with TabPane("Diff [1]", id="diff"):
                with VerticalScroll():
                    yield Static("loading the diff …", id="diff-body")
            with TabPane("Cases [2]", id="cases"):
                yield DataTable(id="cases-table", cursor_type="row")
            with TabPane("Errors [3]", id="errors"):
                with VerticalScroll():
                    yield Static("loading …", id="errors-body")
            with TabPane("Transcript [4]", id="transcript"):
                with VerticalScroll():
                    yield Static("loading …", id="transcript-body")
        yield Footer()

    def on_mount(self) -> None:
        self._load()

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    @work(thread=True, exclusive=True, exit_on_error=False, group="detail", description="load attempt detail")
    def _load(self) -> AttemptDetail:
        return load_detail(self.session, self.attempt)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "detail":
            return
        if event.state == WorkerState.SUCCESS and isinstance(event.worker.result, AttemptDetail):
            self.fill(event.worker.result)
        elif event.state == WorkerState.ERROR:
            self.query_one("#diff-body", Static).update(f"could not load this attempt: {event.worker.error}")

    def fill(self, d: AttemptDetail) -> None:
        diff = self.query_one("#diff-body", Static)
        if d.diff:
            diff.update(Syntax(d.diff, "diff", theme="ansi_dark", word_wrap=False, line_numbers=False))
        else:
            diff.update(Text(d.diff_note, style="italic"))
        table = self.query_one("#cases-table", DataTable)
        table.add_columns("kind", "case", "pass", "mean µs", "± std", "best µs", "runs", "tolerance used", "message")
        for c in d.cases:
            margin = c.get("margin")
            table.add_row(Text(str(c.get("kind", ""))), Text(spec_text(c.get("spec"))),
                          "✓" if c.get("passed") else "✗", fmt.us(c.get("mean_us")), fmt.us(c.get("std_us")),
                          fmt.us(c.get("best_us")), str(c.get("runs", "")),
                          margin_text(margin) if isinstance(margin, (int, float)) else "-",
                          Text(fmt.short(str(c.get("message", "")), 80)))
        if not d.cases:
            table.add_row("", Text(d.result_note or "no per-case results"), "", "", "", "", "", "", "")
        self.query_one("#errors-body", Static).update(self._errors(d))
        self.query_one("#transcript-body", Static).update(
            Text(d.transcript) if d.transcript else Text(d.transcript_note, style="italic"))

    def _errors(self, d: AttemptDetail) -> Text:
        r, a = d.result, self.attempt
        out = Text()
        if r:
            out.append(f"stage {r.get('stage') or '—'}  error class {r.get('error_class') or 'none'}  "
                       f"wall {float(r.get('wall_s') or 0):.1f} s\n", style="bold")
            if r.get("message"):
                out.append(f"{r['message']}\n")
        elif a.message:
            out.append(a.message + "\n")
        if a.message and r.get("message") != a.message:
            out.append(f"verdict: {a.message}\n")
        if d.stderr:
            out.append("\nstderr (tail):\n", style="bold")
            out.append(d.stderr)
        if not out.plain.strip():
            out.append("no errors", style="italic")
        return out
