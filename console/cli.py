"""The `steer` entry point: the UI commands live here (attach, report, and `run` with the console);
everything else is agent.cli's. Textual and matplotlib are imported only by the commands that
need them, so `steer eval` and friends stay fast."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from agent.session import Session, SessionError, default_root, list_sessions, open_session

EXIT_ERROR = 2   # agent.cli's code for a usage error or an unusable session


def _root(args: argparse.Namespace) -> Path:
    root = getattr(args, "root", None)
    return Path(root).expanduser() if root else default_root()


def _pick_session(root: Path, name: str | None) -> Session:
    if name:
        return open_session(root, name)
    sessions = list_sessions(root)
    if not sessions:
        raise SessionError(f"no sessions under {root}; start one with `steer run`")
    # The most recently active session: the one whose events.jsonl moved last.
    return max(sessions, key=lambda s: s.events_path.stat().st_mtime if s.events_path.exists() else 0)


def cmd_attach(args: argparse.Namespace) -> int:
    try:
        session = _pick_session(_root(args), args.name)
    except SessionError as exc:
        print(f"steer: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from console.digest import SeenStore
    from console.tail import SessionTail

    # Fold the backlog while Textual is imported and the screen is built: a long session paints sooner.
    seen = SeenStore()
    tail = SessionTail(session, since_seq=seen.last_seen(session.dir)).preload()
    from console.app import SteerApp

    SteerApp(session, mode="attach", alerts=not args.no_alerts, digest=not args.no_digest, seen=seen, tail=tail).run()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    try:
        session = open_session(_root(args), args.name)
    except SessionError as exc:
        print(f"steer: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from console.report import write_report

    png, md = write_report(session, Path(args.output))
    print(f"wrote {png} and {md}")
    return 0


def cmd_run_console(args: argparse.Namespace) -> int:
    """`steer run` without --headless/--detach: the agent in a worker thread, the console in front."""
    try:
        from agent.cli import UsageError
        from agent.config import ConfigError, RunConfig
        from agent.loop import Agent, prepare_session
    except ImportError as exc:
        print(f"steer: the agent loop is not available in this build ({exc}); "
              f"use `steer attach NAME` to watch a session", file=sys.stderr)
        return EXIT_ERROR
    root = _root(args)
    try:
        cfg = RunConfig.from_args(args)
        session = prepare_session(root, getattr(args, "name", None), cfg)
        agent = Agent(session, cfg)
    except (SessionError, UsageError, ConfigError) as exc:
        print(f"steer: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from console.app import SteerApp

    holder = session.holder()
    if holder:
        # Someone already runs it (a detached agent): watch that one rather than fail on its lock.
        print(f"steer: session {session.name} is already run by pid {holder}; attaching", file=sys.stderr)
        SteerApp(session, mode="attach", alerts=not getattr(args, "no_alerts", False)).run()
        return 0

    def handoff() -> int:
        from agent.daemon import spawn_detached
        return int(spawn_detached(root, session.name))

    app = SteerApp(session, mode="run", runner=lambda stop, abort: agent.run(stop, abort, mode="console"),
                   handoff=handoff, alerts=not getattr(args, "no_alerts", False), digest=False)
    _hand_over_on_hangup(app)
    result = app.run()
    print(f"steer: session {session.name}: {result or 'console closed'}", file=sys.stderr)
    return 0


def _hand_over_on_hangup(app: Any) -> None:
    """A dropped SSH connection sends SIGHUP: hand the run to a detached agent instead of losing it."""
    def hangup(signum: int, frame: object) -> None:
        loop = getattr(app, "_event_loop", None)
        if loop is not None:
            loop.call_soon_threadsafe(app.hang_up)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, hangup)


def add_console_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.steer_commands  # type: ignore[attr-defined]
    _add_attach(sub)
    p = sub.add_parser("report", help="draw a session's timing curves to a PNG, with a markdown summary")
    p.add_argument("name", help="session name")
    p.add_argument("-o", "--output", required=True, help="the PNG to write (the summary goes next to it, .md)")
    p.add_argument("--root", default=None, help="sessions directory (default: $STEER_HOME or ./sessions)")
    p.set_defaults(func=cmd_report)


def _add_attach(sub: Any) -> None:
    p = sub.add_parser("attach", help="open the console on a session (its agent runs detached)")
    p.add_argument("name", nargs="?", help="session name (default: the most recently active one)")
    p.add_argument("--root", default=None, help="sessions directory (default: $STEER_HOME or ./sessions)")
    p.add_argument("--no-alerts", action="store_true", help="no bell or notification on a new best or plateau")
    p.add_argument("--no-digest", action="store_true", help="do not show what happened since your last look")
    p.set_defaults(func=cmd_attach)


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    return set(getattr(parser, "steer_commands").choices)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["attach"]:
        # The common SSH-in path: skip building every command (agent.cli pulls in git and the harness).
        parser = argparse.ArgumentParser(prog="steer")
        _add_attach(parser.add_subparsers(dest="command", metavar="COMMAND"))
        return cmd_attach(parser.parse_args(argv))
    from agent import cli as agent_cli
    parser = agent_cli.build_parser()
    add_console_commands(parser)
    if not argv:
        if "run" not in _commands(parser):
            parser.print_help()
            print("\nsteer: `steer run` is not available in this build yet; `steer attach NAME` watches a session",
                  file=sys.stderr)
            return EXIT_ERROR
        argv = ["run"]
    if argv[0] == "run" and "run" in _commands(parser):
        args = parser.parse_args(argv)
        if not getattr(args, "headless", False) and not getattr(args, "detach", False):
            if not sys.stdin.isatty() or not sys.stdout.isatty():
                print("steer: the console needs a terminal; use `steer run --headless` or `--detach`",
                      file=sys.stderr)
                return EXIT_ERROR
            return cmd_run_console(args)
    os.environ.setdefault("MPLBACKEND", "Agg")
    return agent_cli.run_command(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
