#!/usr/bin/env python3
"""Launch `steer attach` inside tmux on a generated session and capture the pane as text.

    python scripts/tmux_attach.py                 # writes docs/console/tmux_attach.txt
    python scripts/tmux_attach.py --out F --size 80x24 --env NO_COLOR=1

The session is console.demo's (40 attempts, fixed timestamps) and TZ=UTC, so the capture is the
same on every machine; tests/test_console_tmux.py compares the stored capture with a fresh
headless render and, when tmux is installed, with a fresh capture.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "docs" / "console" / "tmux_attach.txt"
READY = ("baseline", "palette")    # the header's second line and the footer: loaded and painted


def tmux(*args: str, check: bool = True) -> str:
    return subprocess.run(["tmux", *args], check=check, capture_output=True, text=True).stdout


def capture(width: int = 120, height: int = 40, env: dict[str, str] | None = None, timeout: float = 30.0) -> str:
    if shutil.which("tmux") is None:
        raise RuntimeError("tmux is not installed")
    with tempfile.TemporaryDirectory(prefix="steer-tmux-") as work:
        root = Path(work) / "sessions"
        subprocess.run([sys.executable, "-m", "console.demo", str(root), "demo"], check=True, cwd=REPO,
                       capture_output=True)
        name = f"steer-capture-{os.getpid()}"
        envs = {"TZ": "UTC", "STEER_STATE_DIR": str(Path(work) / "state"), "PYTHONPATH": str(REPO), **(env or {})}
        cmd = " ".join([f"{k}={v}" for k, v in envs.items()] + [
            sys.executable, "-m", "console.cli", "attach", "demo", "--root", str(root), "--no-digest"])
        # -L: a private tmux server, so nobody's own tmux sessions are touched
        sock = f"steer-{os.getpid()}"
        subprocess.run(["tmux", "-L", sock, "-f", "/dev/null", "new-session", "-d", "-s", name, "-x", str(width),
                        "-y", str(height), f"env -u COLUMNS -u LINES {cmd}"], check=True, cwd=REPO)
        try:
            deadline = time.monotonic() + timeout
            text = ""
            previous = None
            while time.monotonic() < deadline:
                text = tmux("-L", sock, "capture-pane", "-p", "-t", name, check=False)
                # painted, and the same twice in a row: the first paint is complete
                if all(r in text for r in READY) and text == previous:
                    break
                previous = text
                time.sleep(0.5)
            else:
                raise RuntimeError(f"steer attach did not paint within {timeout:.0f} s; the pane shows:\n{text}")
            tmux("-L", sock, "send-keys", "-t", name, "q", check=False)
            time.sleep(0.5)
        finally:
            tmux("-L", sock, "kill-server", check=False)
    lines = [line.rstrip() for line in text.splitlines()]
    lines += [""] * (height - len(lines))
    return "\n".join(lines[:height]) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--size", default="120x40", help="WIDTHxHEIGHT of the pane (default 120x40)")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment for steer")
    args = p.parse_args()
    width, height = (int(x) for x in args.size.lower().split("x"))
    text = capture(width, height, dict(e.split("=", 1) for e in args.env))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({width}x{height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
