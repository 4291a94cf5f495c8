#!/usr/bin/env python3
"""Console benchmark: attach to a generated 10,000-attempt session in a real pseudo-terminal.

Measures, for `steer attach` as a user starts it (a new Python process, imports included):
  - time to first paint: from spawning the process until the screen shows the whole session
    (the header's "#10000"); also until the first byte of output;
  - resident memory after the first paint (VmRSS) and its peak (VmHWM);
  - delay from an event being appended (fsynced, as the agent does) to it being on screen,
    over several events.
Targets (DESIGN.md): paint <= 1.5 s, memory <= 300 MB, delay <= 0.5 s.

    python scripts/bench_console.py [--attempts 10000] [--size 120x40] [--events 20]
"""
from __future__ import annotations

import argparse
import fcntl
import os
import platform
import pty
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent import events as ev  # noqa: E402
from agent.session import EventLog, create_session  # noqa: E402
from console.demo import demo_config, demo_events, write_events  # noqa: E402

ANSI = re.compile(rb"\x1b\[[0-9;?<>=$]*[ -/]*[@-~]|\x1b[\]P^_].*?(?:\x07|\x1b\\)|\x1b[=>()][0-9A-Za-z]?", re.S)


class Screen:
    """Collects what the app writes to its terminal; finds text in it with escapes removed."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.raw = bytearray()
        self.text = b""
        self.first_byte: float | None = None
        self.lock = threading.Lock()
        self.done = False
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        while not self.done:
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if not r:
                continue
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                if self.first_byte is None:
                    self.first_byte = time.perf_counter()
                self.raw += data

    def wait_for(self, needle: str, since: int = 0, timeout: float = 30.0) -> tuple[float, int]:
        """(time it appeared, offset in raw output past it), searching output after `since`."""
        want = needle.encode()
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            with self.lock:
                chunk = bytes(self.raw[since:])
            clean = ANSI.sub(b"", chunk)
            if want in clean:
                return time.perf_counter(), since + len(chunk)
            time.sleep(0.002)
        raise TimeoutError(f"{needle!r} did not appear within {timeout} s")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def generate(root: Path, attempts: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    session = create_session(root, "bench", demo_config())
    write_events(session, demo_events(attempts, results=True, stopped=False))
    return time.perf_counter() - t0, session.events_path.stat().st_size


def attach_once(root: Path, work: Path, attempts: int, cols: int, rows: int, events: int) -> dict[str, object]:
    """Start `steer attach` in a fresh pty; time its first paint, its memory, and `events` delays."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm-256color", STEER_STATE_DIR=str(work / "state"), PYTHONPATH=str(REPO))
    screen = Screen(master)
    t_spawn = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "attach", "bench", "--root", str(root),
                             "--no-digest", "--no-alerts"], stdin=slave, stdout=slave, stderr=slave, env=env,
                            cwd=REPO, start_new_session=True)
    os.close(slave)
    try:
        t_paint, _ = screen.wait_for(f"#{attempts} ")
        out: dict[str, object] = {"paint": t_paint - t_spawn, "cpu": cpu_s(proc.pid),
                                  "first": (screen.first_byte or t_paint) - t_spawn}
        time.sleep(1.0)
        out["rss"], out["hwm"] = rss_mb(proc.pid)
        # the agent's way of appending: one open log, each event fsynced (opening it reads the file once)
        log = EventLog(root / "bench" / "events.jsonl")
        delays = []
        for k in range(events):
            marker = f"bench-marker-{time.time_ns()}"
            time.sleep(0.3)
            with screen.lock:
                offset = len(screen.raw)
            t0 = time.perf_counter()
            log.append(ev.ErrorEvent(where="bench", message=marker))
            t1, _ = screen.wait_for(marker, since=offset, timeout=10)
            delays.append(t1 - t0)
        log.close()
        out["delays"] = delays
        out["rss_after"], out["hwm_after"] = rss_mb(proc.pid)
        return out
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        screen.done = True
        os.close(master)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attempts", type=int, default=10_000)
    p.add_argument("--size", default="120x40")
    p.add_argument("--repeat", type=int, default=5, help="attaches to measure (each a new process)")
    p.add_argument("--events", type=int, default=10, help="events appended per attach for the delay")
    p.add_argument("--keep", action="store_true", help="keep the generated session directory")
    args = p.parse_args()
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    work = Path(tempfile.mkdtemp(prefix="steer-bench-"))
    root = work / "sessions"
    try:
        gen_s, size = generate(root, args.attempts)
        lines = sum(1 for _ in open(root / "bench" / "events.jsonl", "rb"))
        print(f"session: {args.attempts} attempts, {lines} events, {size / 1e6:.1f} MB events.jsonl "
              f"(generated in {gen_s:.1f} s)")
        load_before = os.getloadavg()[0]
        runs = [attach_once(root, work, args.attempts, cols, rows, args.events) for _ in range(args.repeat)]
        load_after = os.getloadavg()[0]
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)])
    import textual
    paints = sorted(float(r["paint"]) for r in runs)  # type: ignore[arg-type]
    cpus = sorted(float(r["cpu"]) for r in runs)  # type: ignore[arg-type]
    firsts = sorted(float(r["first"]) for r in runs)  # type: ignore[arg-type]
    delays = sorted(d for r in runs for d in r["delays"])  # type: ignore[attr-defined]
    mem = max(max(float(r["hwm"]), float(r["hwm_after"])) for r in runs)  # type: ignore[arg-type]
    rss = statistics.median(float(r["rss"]) for r in runs)  # type: ignore[arg-type]
    print(f"terminal {cols}x{rows}; {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{load_before:.2f} -> {load_after:.2f}; Python {platform.python_version()}, textual {textual.__version__}")
    print(f"{len(runs)} attaches, each a new process; min / median / max:")
    print(f"  time to first output:     {firsts[0]:.2f} / {statistics.median(firsts):.2f} / {firsts[-1]:.2f} s")
    print(f"  time to first full paint: {paints[0]:.2f} / {statistics.median(paints):.2f} / {paints[-1]:.2f} s"
          f"   (target <= 1.5 s)")
    print(f"  CPU time by then:         {cpus[0]:.2f} / {statistics.median(cpus):.2f} / {cpus[-1]:.2f} s")
    print(f"  resident memory:          {rss:.0f} MB after the paint (median), {mem:.0f} MB peak   (target <= 300 MB)")
    p95 = delays[min(len(delays) - 1, int(0.95 * len(delays)))]
    print(f"  event -> screen delay:    {delays[0] * 1000:.0f} / {statistics.median(delays) * 1000:.0f} / "
          f"{delays[-1] * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms over {len(delays)} events   (target <= 500 ms)")
    ok = statistics.median(paints) <= 1.5 and mem <= 300 and p95 <= 0.5
    print("targets met (median paint, peak memory, p95 delay)" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
