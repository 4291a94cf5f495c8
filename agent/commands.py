"""`steer run/say/ls/status/stop/export`: the agent's command line (registered by agent.cli.build_parser).

Every failure a person can cause (an unknown session, a bad option, a dead endpoint) ends in
one line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path

from agent.beam import BeamError, resolve_branch
from agent.config import ConfigError, RunConfig, add_run_options
from agent.daemon import spawn_detached, stop_agent, wait_started
from agent.session import Session, SessionError, append_inbox, default_root, list_sessions, open_session
from agent.steering import HELP
from agent.summary import load_state, ls_lines, status_text
from agent.vcs import SessionRepo, VcsError


class CommandError(Exception):
    """Printed as `steer: <message>`, exit code 2."""


def _root(args: argparse.Namespace) -> Path:
    return Path(args.root).expanduser() if getattr(args, "root", None) else default_root()


def latest_session(root: Path) -> Session:
    sessions = list_sessions(root)
    if not sessions:
        raise CommandError(f"no sessions under {root} (start one with `steer run`)")
    return max(sessions, key=_last_change)


def _last_change(s: Session) -> float:
    try:
        return s.events_path.stat().st_mtime
    except OSError:   # no events yet, or deleted while listing
        return 0.0


def _session(args: argparse.Namespace) -> Session:
    root = _root(args)
    name = getattr(args, "name", None)
    return open_session(root, name) if name else latest_session(root)


# -- run -------------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from agent.loop import Agent, prepare_session   # the loop pulls in the harness: only when running
    root = _root(args)
    try:
        cfg = RunConfig.from_args(args)
        session = prepare_session(root, args.name, cfg)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    if args.detach:
        holder = session.holder()
        if holder:
            raise CommandError(f"session {session.name} is already run by an agent (pid {holder}); "
                               f"`steer stop {session.name}` first")
        pid = spawn_detached(root, session.name)
        if not wait_started(session, pid):
            tail = session.log_path.read_text(errors="replace").strip().splitlines()[-1:] if session.log_path.exists() else []
            raise CommandError(f"the detached agent for {session.name} did not start"
                               + (f": {tail[0]}" if tail else "") + f" (log: {session.log_path})")
        print(f"{session.name} {pid}")
        print(f"detached; log in {session.log_path}; `steer attach {session.name}` to watch, "
              f"`steer stop {session.name}` to stop", file=sys.stderr)
        return 0
    stop, abort = threading.Event(), threading.Event()
    _install_signals(stop, abort)
    agent = Agent(session, cfg, echo=lambda line: print(line, flush=True))
    agent.stop_reason = "signal"     # here only SIGINT/SIGTERM (`steer stop`) set `stop`
    print(f"session {session.name} in {session.dir}", flush=True)
    reason = agent.run(stop=stop, abort=abort, mode=getattr(args, "run_mode", None) or "headless")
    return 0 if reason in ("budget", "stop", "signal", "finished") else 1


def _install_signals(stop: threading.Event, abort: threading.Event) -> None:
    """First SIGINT/SIGTERM: stop after the current evaluation. Second: abort it."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: object) -> None:
        if stop.is_set():
            abort.set()
            print("steer: aborting the running evaluation", file=sys.stderr, flush=True)
        else:
            stop.set()
            print("steer: stopping after the current evaluation (signal again to abort it)", file=sys.stderr,
                  flush=True)
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


# -- say -------------------------------------------------------------------------------------------
def cmd_say(args: argparse.Namespace) -> int:
    root = _root(args)
    words = list(args.words)
    if len(words) >= 2 and (root / words[0] / "session.toml").is_file():
        session, words = open_session(root, words[0]), words[1:]
    else:
        session = latest_session(root)
    text = " ".join(words).strip()
    if not text:
        raise CommandError("nothing to say")
    if text.startswith("/"):
        name = shlex.split(text)[0].lower() if text.strip() != "/" else "/"
        known = sorted({k.split()[0] for k in HELP} | {"/unfocus"})
        if name not in known:
            raise CommandError(f"unknown command {name} (commands: {', '.join(known)})")
    state = load_state(session)
    target = None
    if args.branch:
        try:
            target = resolve_branch(state, args.branch)
        except BeamError as exc:
            raise CommandError(str(exc)) from None
    rec = append_inbox(session, text, target=target, scope="standing" if args.standing else "once")
    where = "" if session.holder() else " (no agent runs it now: it is read when the session resumes)"
    print(f"{rec['id']} queued for {session.name}{where}")
    return 0


# -- ls / status / stop ------------------------------------------------------------------------------
def cmd_ls(args: argparse.Namespace) -> int:
    sessions = list_sessions(_root(args))
    if not sessions:
        print(f"no sessions under {_root(args)}")
        return 0
    print("\n".join(ls_lines(sessions)))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    session = _session(args)
    print(status_text(session, load_state(session)))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    session = _session(args)
    pid = session.holder()
    if not pid:
        print(f"no agent is running session {session.name}")
        return 0
    if stop_agent(session, timeout=args.wait, abort=args.abort):
        print(f"stopped the agent of {session.name} (pid {pid})")
        return 0
    print(f"asked the agent of {session.name} (pid {pid}) to stop; it finishes its current evaluation first "
          f"(`steer stop {session.name} --abort` cancels it)")
    return 0


# -- export ------------------------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    session = _session(args)
    state = load_state(session)
    if args.branch:
        try:
            branch = state.branches[resolve_branch(state, args.branch)]
        except BeamError as exc:
            raise CommandError(str(exc)) from None
    else:
        measured = [b for b in state.branches.values() if b.best_us]
        if not measured:
            raise CommandError(f"session {session.name} has no correct kernel yet")
        branch = min(measured, key=lambda b: b.best_us or float("inf"))
    if not branch.best_us:
        raise CommandError(f"branch {branch.name} has no correct kernel yet")
    try:
        repo = SessionRepo.open_or_init(session.repo)
        code = repo.read(branch.head_sha)
    except VcsError as exc:
        raise CommandError(str(exc)) from None
    if "stream" in code.lower():
        line = next(i for i, ln in enumerate(code.splitlines(), 1) if "stream" in ln.lower())
        raise CommandError(f"not exported: {branch.name}@{branch.head_sha[:10]} contains \"stream\" (line {line}), "
                           "which GPU MODE rejects")
    out = Path(args.output)
    out.write_text(code)
    speed = f", {state.baseline_us / branch.best_us:.3f}x the baseline" if state.baseline_us else ""
    print(f"wrote {out}: {branch.name}@{branch.head_sha[:10]}, geomean {branch.best_us:.2f} µs{speed}")
    return 0


# -- the parser --------------------------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the agent on a session (new, or resume NAME)")
    p.add_argument("name", nargs="?", default=None, help="session name (default: a new timestamped session)")
    p.add_argument("--headless", action="store_true", help="run in the foreground without the console")
    p.add_argument("--detach", action="store_true", help="start a headless agent in the background and return")
    add_run_options(p)
    p.add_argument("--lock-wait", dest="lock_wait", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--run-mode", dest="run_mode", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("say", help="steer a session: a prompt, or a /command")
    p.add_argument("words", nargs="+", metavar="[NAME] TEXT", help="session (default: the latest) and the text")
    p.add_argument("--branch", default=None, help="target branch (default: all)")
    p.add_argument("--standing", action="store_true", help="apply to every iteration until /drop ID")
    p.add_argument("--root", default=None)
    p.set_defaults(func=cmd_say)

    p = sub.add_parser("ls", help="list sessions with state, iterations and best result")
    p.add_argument("--root", default=None)
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("status", help="beam table, last attempts and pending steering of a session")
    p.add_argument("name", nargs="?", default=None)
    p.add_argument("--root", default=None)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("stop", help="stop a session's agent after its current evaluation")
    p.add_argument("name", nargs="?", default=None)
    p.add_argument("--wait", type=float, default=30.0, metavar="SECONDS", help="how long to wait (default 30)")
    p.add_argument("--abort", action="store_true", help="also cancel the running evaluation")
    p.add_argument("--root", default=None)
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("export", help="write a branch's best kernel as one GPU MODE submission file")
    p.add_argument("name", nargs="?", default=None)
    p.add_argument("--branch", default=None, help="branch (default: the session's best)")
    p.add_argument("-o", "--output", default="submission.py")
    p.add_argument("--root", default=None)
    p.set_defaults(func=cmd_export)


ERRORS = (CommandError, SessionError, ConfigError)
