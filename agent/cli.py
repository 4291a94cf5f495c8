"""`steer` commands that need no UI: eval and bench here, run/say/ls/status/stop/export from agent.commands.

Exit codes: 0 pass, 1 the candidate failed, 2 usage error, a malformed task or a harness fault.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from agent import commands
from agent.harness.result import HARNESS, MODES
from agent.harness.runner import EvalOptions, evaluate
from agent.harness.table import format_bench, format_eval
from agent.harness.task import TaskError, load_task

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2

Command = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A bad argument: printed as one line, exit code 2."""


def add_eval_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default=None, help="task directory or bundled task name (default: qr)")
    p.add_argument("--mode", choices=MODES, default="quick", help="timing method (default: quick)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--gpu", type=int, default=None, help="GPU index to use (default: the first visible)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="time limit for each stage (default: the task's limits)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _options(args: argparse.Namespace) -> EvalOptions:
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    return EvalOptions(mode=args.mode, device=args.device, gpu=args.gpu, stage_timeout=args.timeout)


def _progress(quiet: bool) -> Callable[[dict], None] | None:
    if quiet or not sys.stderr.isatty():
        return None

    def show(msg: dict) -> None:
        if msg.get("type") == "case":
            print(f"\r  {msg['kind']} {msg['index'] + 1}/{msg['total']}   ", end="", file=sys.stderr, flush=True)
    return show


def cmd_eval(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    task = load_task(args.task)
    result = evaluate(path, task, _options(args), on_progress=_progress(args.json))
    if sys.stderr.isatty() and not args.json:
        print("\r", end="", file=sys.stderr)
    print(json.dumps(result.to_json(), indent=2) if args.json else format_eval(result))
    if result.ok:
        return EXIT_PASS
    return EXIT_ERROR if result.error_class == HARNESS else EXIT_FAIL


def cmd_bench(args: argparse.Namespace) -> int:
    task = load_task(args.task)
    if task.baseline is None:
        raise UsageError(f"task {task.name} names no steer.baseline in task.yml")
    files = [Path(f) for f in args.files] or task.seed_candidates()
    for f in files:
        if not f.is_file():
            raise UsageError(f"{f}: no such file")
    opts = _options(args)
    opts.prestart = True  # each next candidate finds its worker ready
    results = []
    for f in [task.baseline] + files:
        if not args.json:
            print(f"evaluating {f.name} ...", file=sys.stderr, flush=True)
        results.append(evaluate(f, task, opts, on_progress=_progress(args.json)))
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        print(format_bench(results[0], results[1:]))
    if not results[0].ok:
        return EXIT_ERROR
    return EXIT_PASS if all(r.ok for r in results) else EXIT_FAIL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="steer", description="Steer: run, watch and steer a kernel-optimizing agent.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("eval", help="evaluate one candidate file against a task")
    p.add_argument("file", help="candidate .py exposing custom_kernel(data)")
    add_eval_options(p)
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("bench", help="evaluate the baseline and candidates in one run; print us and speedups")
    p.add_argument("files", nargs="*", help="candidate files (default: the task's seed candidates)")
    add_eval_options(p)
    p.set_defaults(func=cmd_bench)
    commands.register(sub)
    parser.set_defaults(func=None)
    parser.steer_commands = sub  # type: ignore[attr-defined]  # console/cli.py adds the UI commands here
    return parser


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        return int(args.func(args))
    except (UsageError, TaskError, *commands.ERRORS) as exc:
        print(f"steer: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("steer: interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
