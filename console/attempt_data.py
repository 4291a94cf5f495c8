"""What the attempt detail shows, gathered off the UI thread: the diff from git, the harness
result, the stderr tail and the proposer transcript. Every source may be missing; each one
that is says why instead of failing."""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.events import parse_line
from agent.session import Session
from agent.state import Attempt

MAX_DIFF = 400_000
MAX_TEXT = 200_000


@dataclass
class AttemptDetail:
    iteration: int
    diff: str = ""
    diff_note: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    result_note: str = ""
    transcript: str = ""
    transcript_note: str = ""

    @property
    def cases(self) -> list[dict[str, Any]]:
        return [c for c in self.result.get("cases", []) if isinstance(c, dict)]

    @property
    def stderr(self) -> str:
        return str(self.result.get("stderr_tail") or "")


def git_diff(repo: Path, parent: str, sha: str, timeout: float = 15.0) -> tuple[str, str]:
    """(diff text, note): the note says why there is no diff."""
    if not sha:
        return "", "this attempt has no commit (it failed before committing, or is still running)"
    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        return "", f"no git repository at {repo}"
    args = ["diff", "--no-color", "--no-ext-diff", parent, sha] if parent else ["show", "--no-color", "--format=", sha]
    try:
        out = subprocess.run(["git", "-C", str(repo), "-c", "core.quotepath=off", *args], capture_output=True,
                             text=True, errors="replace", timeout=timeout)
    except FileNotFoundError:
        return "", "git is not installed"
    except subprocess.TimeoutExpired:
        return "", f"git diff took more than {timeout:.0f} s"
    if out.returncode != 0:
        return "", f"git: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'failed'}"
    text = out.stdout
    if len(text) > MAX_DIFF:
        text = text[:MAX_DIFF] + f"\n… diff cut at {MAX_DIFF} characters\n"
    return text, "" if text.strip() else "no changes against the parent"


def _read(path: Path) -> str | None:
    try:
        data = path.read_text(errors="replace")
    except OSError:
        return None
    return data if len(data) <= MAX_TEXT else data[:MAX_TEXT] + f"\n… cut at {MAX_TEXT} characters\n"


def scan_events(session: Session, iteration: int) -> dict[str, Any]:
    """The iteration's proposal_made and eval_finished events, found without parsing every line."""
    needle = re.compile(rb'"iteration": %d[,}]' % iteration)
    found: dict[str, Any] = {}
    try:
        f = open(session.events_path, "rb")
    except OSError:
        return found
    with f:
        for line in f:
            if (b'"eval_finished"' in line or b'"proposal_made"' in line) and needle.search(line):
                e = parse_line(line)
                if e is not None and getattr(e, "iteration", None) == iteration:
                    found[e.type] = e
    return found


def load_detail(session: Session, a: Attempt) -> AttemptDetail:
    d = AttemptDetail(iteration=a.iteration)
    d.diff, d.diff_note = git_diff(session.repo, a.parent_sha, a.sha)
    art = session.artifacts / str(a.iteration)
    scanned: dict[str, Any] | None = None
    raw = _read(art / "eval.json")
    if raw is not None:
        try:
            d.result = json.loads(raw)
        except ValueError:
            d.result_note = f"{art / 'eval.json'} is not valid JSON"
    if not d.result:
        scanned = scan_events(session, a.iteration)
        fin = scanned.get("eval_finished")
        if fin is not None:
            d.result = dict(fin.result) or {"ok": fin.ok, "error_class": fin.error_class, "message": fin.message,
                                            "geomean_us": fin.geomean_us}
        elif not d.result_note:
            d.result_note = "no evaluation recorded for this attempt"
    transcript = _read(art / "transcript.txt")
    if transcript is None:
        scanned = scan_events(session, a.iteration) if scanned is None else scanned
        prop = scanned.get("proposal_made")
        rel = getattr(prop, "transcript", None)
        if rel:
            transcript = _read(session.dir / rel)
    if transcript is None:
        d.transcript_note = "no transcript (the tune proposer writes none, or it was not kept)"
    else:
        d.transcript = transcript
    return d


def spec_text(spec: Any) -> str:
    if isinstance(spec, dict):
        return " ".join(f"{k}={v}" for k, v in spec.items())
    return str(spec)
