"""`--on-event CMD`: run a shell command with an event's JSON on stdin, for a phone push or a mail.

Hooks run in a background thread with a time limit, so a slow or hanging command never
holds up the loop; their output goes to the agent's log.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from agent import events as ev

HOOKED = ("plateau", "budget_reached", "error", "agent_stopped")


class Hooks:
    def __init__(self, command: str | None, timeout_s: float = 10.0):
        self.command = command
        self.timeout_s = timeout_s
        self._threads: list[threading.Thread] = []

    def fire(self, event: ev.Event) -> None:
        if not self.command or event.type not in HOOKED:
            return
        payload = json.dumps(event.to_json(), default=str).encode()
        t = threading.Thread(target=self._run, args=(payload, event.type), daemon=True, name="steer-hook")
        t.start()
        self._threads = [x for x in self._threads if x.is_alive()] + [t]

    def _run(self, payload: bytes, kind: str) -> None:
        try:
            proc = subprocess.Popen(str(self.command), shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            print(f"steer: --on-event command could not start: {exc}", file=sys.stderr, flush=True)
            return
        try:
            out, _ = proc.communicate(payload, timeout=self.timeout_s)
            if proc.returncode:
                tail = out.decode(errors="replace").strip().splitlines()[-1:] or [""]
                print(f"steer: --on-event ({kind}) exited {proc.returncode}: {tail[0]}", file=sys.stderr, flush=True)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            print(f"steer: --on-event ({kind}) ran past {self.timeout_s:g} s and was killed", file=sys.stderr,
                  flush=True)

    def wait(self, timeout: float) -> None:
        """Give hooks still running (e.g. the agent_stopped one) a moment before the process exits."""
        for t in self._threads:
            t.join(timeout)
