"""The session's git record (gitpython): a branch per beam member, a commit per attempt.

Each commit holds one file, `submission.py` (the candidate in GPU MODE's submission form), so
`git show qr/cholqr:submission.py` is always a submittable kernel. Attempts are written with
plumbing (objects + update-ref), never through the index, so a crash cannot leave a half
commit; the checkout (HEAD) only mirrors the last accepted branch for a person browsing.
Refs: refs/heads/<task>/<family> (accepted line), refs/attempts/<iteration> (every attempt),
refs/steer/root (the empty root every branch grows from).
"""
from __future__ import annotations

import functools
import io
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import git
from git.objects.fun import tree_to_stream
from gitdb import IStream

from agent.harness.result import margin_text

CANDIDATE_FILE = "submission.py"
ROOT_REF = "refs/steer/root"
ATTEMPT_PREFIX = "refs/attempts/"
AGENT = git.Actor("Steer agent", "steer@localhost")
TRAILER_KEYS = ("Steer-Iteration", "Steer-Branch", "Steer-Verdict", "Steer-Steering")


class VcsError(RuntimeError):
    """A git operation failed; the message says which and why."""


@dataclass
class CaseLine:
    label: str
    mean_us: float | None
    stderr_us: float | None = None


@dataclass
class AttemptRecord:
    """What a commit message says about one attempt."""
    summary: str
    iteration: int
    branch: str
    verdict: str                      # accepted | rejected | failed | seed
    reason: str = ""
    ok: bool = False
    error: str = ""
    geomean_us: float | None = None
    geomean_se_us: float | None = None
    speedup: float | None = None
    baseline_us: float | None = None
    cases: list[CaseLine] = field(default_factory=list)
    steering_ids: list[str] = field(default_factory=list)
    margin: float | None = None       # the most of the checker's tolerance an output used (1.0 = the limit)
    margin_case: str = ""

    def message(self) -> str:
        lines = [_one_line(self.summary) or "(no summary)", ""]
        if self.ok and self.geomean_us:
            se = f" ± {self.geomean_se_us:.2f}" if self.geomean_se_us else ""
            vs = f" ({self.speedup:.3f}x vs baseline {self.baseline_us:.2f} µs)" if self.speedup and self.baseline_us else ""
            lines.append(f"Result: pass, geomean {self.geomean_us:.2f} µs{se}{vs}")
        elif self.ok:
            lines.append("Result: pass")
        else:
            lines.append(f"Result: fail: {_one_line(self.error) or 'no evaluation'}")
        if self.ok and self.margin is not None:
            lines.append(f"Accuracy: {margin_text(self.margin)} of the checker's tolerance at most"
                         + (f" ({self.margin_case})" if self.margin_case else ""))
        lines.append(f"Verdict: {self.verdict}" + (f" ({_one_line(self.reason)})" if self.reason else ""))
        if self.cases:
            lines.append("Cases (mean µs ± stderr):")
            for c in self.cases:
                mean = f"{c.mean_us:.2f}" if c.mean_us is not None else "-"
                se = f" ± {c.stderr_us:.2f}" if c.stderr_us is not None else ""
                lines.append(f"  {c.label}: {mean}{se}")
        lines += ["", f"Steer-Iteration: {self.iteration}", f"Steer-Branch: {self.branch}",
                  f"Steer-Verdict: {self.verdict}",
                  f"Steer-Steering: {', '.join(self.steering_ids) if self.steering_ids else 'none'}"]
        return "\n".join(lines) + "\n"


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_trailers(message: str) -> dict[str, str]:
    paragraphs = [p for p in message.strip().split("\n\n") if p.strip()]
    out: dict[str, str] = {}
    if paragraphs:
        for line in paragraphs[-1].splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in TRAILER_KEYS:
                out[key.strip()] = value.strip()
    return out


def _helpers_apart() -> None:
    """Start gitpython's long-lived `git cat-file` helpers in a session of their own (POSIX).

    A Ctrl-C in a terminal goes to its whole foreground process group: without this it killed
    those helpers too, and the next commit of a stopping run failed with a broken pipe and went
    through `_restarting_helpers` (every H200 tune run stopped by `timeout -s INT` did). Only the
    helpers move; `git` commands that run and exit stay in Steer's group, so a Ctrl-C stops them
    with Steer. gitpython starts processes through `git.cmd.safer_popen` (older versions call
    `git.cmd.Popen`); this wraps whichever it has, once."""
    name = "safer_popen" if hasattr(git.cmd, "safer_popen") else "Popen"
    start = getattr(git.cmd, name, None)
    if os.name != "posix" or start is None or getattr(start, "steer_apart", False):
        return

    def popen(command: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(command, (list, tuple)) and "cat-file" in command:
            kw.setdefault("start_new_session", True)
        return start(command, *args, **kw)

    popen.steer_apart = True  # type: ignore[attr-defined]
    setattr(git.cmd, name, popen)


_helpers_apart()


def _restarting_helpers(method: Callable) -> Callable:
    """Retry once after restarting gitpython's long-lived `git cat-file` children.

    They run in a session of their own (`_helpers_apart`), so a Ctrl-C no longer reaches them;
    this covers a helper that died otherwise (killed, or started where that could not be done).
    """
    @functools.wraps(method)
    def wrapper(self: "SessionRepo", *args: Any, **kw: Any) -> Any:
        try:
            return method(self, *args, **kw)
        except VcsError as first:
            self.repo.git.clear_cache()
            result = method(self, *args, **kw)
            if self.on_recovery is not None:   # it was the helpers, not the repository: say so
                self.on_recovery("git helpers restarted", f"{method.__name__} failed ({first}); it worked on retry")
            return result
    return wrapper


class SessionRepo:

    def __init__(self, repo: git.Repo):
        self.repo = repo
        self.path = Path(repo.working_tree_dir or repo.git_dir)
        self.on_recovery: Callable[[str, str], None] | None = None   # (action, detail) of a repair made here

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def open_or_init(cls, path: Path, title: str = "Steer session") -> "SessionRepo":
        try:
            if (path / ".git").exists():
                return cls(git.Repo(path))
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            repo = git.Repo.init(path)
            with repo.config_writer() as cw:
                cw.set_value("user", "name", AGENT.name)
                cw.set_value("user", "email", AGENT.email)
                cw.set_value("gc", "autoDetach", "false")
            self = cls(repo)
            root = self._commit_tree(self._tree({}), f"{title}\n\nThe empty root every branch of this session grows from.\n",
                                     parents=[])
            self._update_ref(ROOT_REF, root)
            return self
        except (git.GitError, OSError) as exc:
            raise VcsError(f"{path}: cannot open the session repository: {exc}") from None

    # -- low level -----------------------------------------------------------------------
    def _store(self, kind: str, data: bytes) -> bytes:
        return self.repo.odb.store(IStream(kind, len(data), io.BytesIO(data))).binsha

    def _tree(self, files: dict[str, str]) -> str:
        entries = [(self._store("blob", text.encode()), 0o100644, name) for name, text in sorted(files.items())]
        buf = io.BytesIO()
        tree_to_stream(entries, buf.write)
        return self._store("tree", buf.getvalue()).hex()

    def _commit_tree(self, tree_sha: str, message: str, parents: list[str]) -> str:
        tree = self.repo.tree(tree_sha)
        commit = git.Commit.create_from_tree(self.repo, tree, message,
                                             parent_commits=[self.repo.commit(p) for p in parents],
                                             head=False, author=AGENT, committer=AGENT)
        return commit.hexsha

    def _update_ref(self, ref: str, sha: str, old: str | None = None) -> None:
        args = [ref, sha] + ([old] if old else [])
        try:
            self.repo.git.update_ref("-m", "steer", *args)
        except git.GitCommandError as exc:
            raise VcsError(f"cannot move {ref} to {sha[:10]}: {exc.stderr.strip() or exc}") from None

    # -- the record ----------------------------------------------------------------------
    def root(self) -> str:
        return self.resolve(ROOT_REF) or ""

    @_restarting_helpers
    def commit(self, code: str, message: str, parent: str) -> str:
        """A commit holding `code` as submission.py on top of `parent`; no ref moves."""
        try:
            return self._commit_tree(self._tree({CANDIDATE_FILE: code}), message, parents=[parent])
        except (git.GitError, ValueError, OSError) as exc:
            raise VcsError(f"cannot commit on {parent[:10]}: {exc}") from None

    @_restarting_helpers
    def create_branch(self, branch: str, sha: str) -> None:
        self._update_ref("refs/heads/" + branch, sha)

    @_restarting_helpers
    def move_branch(self, branch: str, sha: str, old: str | None = None) -> None:
        self._update_ref("refs/heads/" + branch, sha, old)

    @_restarting_helpers
    def mark_attempt(self, iteration: int, sha: str) -> None:
        self._update_ref(f"{ATTEMPT_PREFIX}{iteration}", sha)

    def head(self, branch: str) -> str | None:
        return self.resolve("refs/heads/" + branch)

    def attempt(self, iteration: int) -> str | None:
        return self.resolve(f"{ATTEMPT_PREFIX}{iteration}")

    def resolve(self, rev: str) -> str | None:
        try:
            return self.repo.git.rev_parse("--verify", "--quiet", rev + "^{commit}").strip() or None
        except git.GitCommandError:
            return None

    @_restarting_helpers
    def read(self, sha: str) -> str:
        try:
            blob = self.repo.commit(sha).tree[CANDIDATE_FILE]
            return blob.data_stream.read().decode("utf-8", "replace")
        except KeyError:
            raise VcsError(f"{sha[:10]} holds no {CANDIDATE_FILE}") from None
        except (ValueError, git.GitError, OSError) as exc:   # OSError: a cat-file helper died (Ctrl-C)
            raise VcsError(f"cannot read {sha[:10]}: {exc}") from None

    @_restarting_helpers
    def message(self, sha: str) -> str:
        try:
            return str(self.repo.commit(sha).message)
        except (ValueError, git.GitError, OSError) as exc:
            raise VcsError(f"cannot read the message of {sha[:10]}: {exc}") from None

    def trailers(self, sha: str) -> dict[str, str]:
        return parse_trailers(self.message(sha))

    def diff(self, parent: str, sha: str) -> str:
        try:
            return self.repo.git.diff(parent, sha, "--", CANDIDATE_FILE)
        except git.GitCommandError as exc:
            return f"(no diff: {exc})"

    def refs(self, prefix: str) -> dict[str, str]:
        out = self.repo.git.for_each_ref("--format=%(refname) %(objectname)", prefix)
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    def branches(self) -> dict[str, str]:
        return {ref[len("refs/heads/"):]: sha for ref, sha in self.refs("refs/heads").items()}

    def attempts(self) -> dict[int, str]:
        out = {}
        for ref, sha in self.refs(ATTEMPT_PREFIX.rstrip("/")).items():
            tail = ref[len(ATTEMPT_PREFIX):]
            if tail.isdigit():
                out[int(tail)] = sha
        return out

    def keep(self, ref: str, sha: str) -> None:
        """Keep a commit reachable under another ref (a branch position being overruled)."""
        self._update_ref(ref, sha)

    # -- for people and external agents ------------------------------------------------------
    def show(self, branch: str) -> None:
        """Point HEAD (and the checkout) at a branch, so `git log` in repo/ starts there."""
        try:
            self.repo.git.symbolic_ref("HEAD", "refs/heads/" + branch)
            self.repo.git.reset("--hard", "-q")
        except git.GitCommandError:
            pass  # cosmetic: the record is in the refs, not the checkout

    def stale_locks(self) -> list[Path]:
        """Lock files git leaves when it is killed mid-write: the index, HEAD, packed refs, any ref, worktrees'."""
        git_dir = Path(self.repo.git_dir)
        found = [git_dir / name for name in ("index.lock", "HEAD.lock", "packed-refs.lock", "config.lock")]
        found = [p for p in found if p.exists()]
        found += sorted((git_dir / "refs").rglob("*.lock"))
        found += sorted((git_dir / "worktrees").glob("*/*.lock"))
        return found

    def prune_worktrees(self) -> list[str]:
        """Forget worktrees whose directories are gone; git's own lines about each one pruned."""
        try:
            out = self.repo.git.worktree("prune", "--verbose")
        except git.GitCommandError:
            return []
        return [line for line in out.splitlines() if line.strip()]

    @contextmanager
    def worktree(self, sha: str, path: Path) -> Iterator[Path]:
        """A detached checkout of `sha` at `path`, removed afterwards whatever happens in it."""
        try:
            self.repo.git.worktree("add", "--detach", "--force", str(path), sha)
        except git.GitCommandError as exc:
            raise VcsError(f"cannot create a worktree at {path}: {exc.stderr.strip() or exc}") from None
        try:
            yield path
        finally:
            try:
                self.repo.git.worktree("remove", "--force", "--force", str(path))
            except git.GitCommandError:
                shutil.rmtree(path, ignore_errors=True)
                self.prune_worktrees()

    def close(self) -> None:
        self.repo.close()

