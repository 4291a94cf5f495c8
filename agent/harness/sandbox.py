"""The box a candidate runs in: private temp dirs, a read-only task copy, a scrubbed env, rlimits, cleanup."""
from __future__ import annotations

import os
import resource
import secrets
import shutil
import signal
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
MARKER_VAR = "STEER_EVAL_ID"
FILE_SIZE_LIMIT = 1 << 30          # no single file the candidate writes grows past 1 GiB
OPEN_FILES_LIMIT = 4096
EXTRA_TASKS = 2048                 # threads + processes beyond what the user already runs
KILL_PASSES = 20                   # marker scans at the end of an evaluation, until none is found
CPU_MEMORY_LIMIT = 16 << 30        # address space, CPU runs only (CUDA reserves huge virtual ranges)


def scrub_env(env: dict[str, str]) -> dict[str, str]:
    """Drop every variable whose name looks like a credential."""
    return {k: v for k, v in env.items() if not any(m in k.upper() for m in SECRET_MARKERS)}


@dataclass
class Sandbox:
    root: Path
    task_dir: Path      # read-only copy of the task files, with the candidate as submission.py
    work_dir: Path      # cwd, HOME and TMPDIR of the candidate
    marker: str         # value of STEER_EVAL_ID in the candidate's environment

    @classmethod
    def create(cls, task_files: list[Path]) -> "Sandbox":
        root = Path(tempfile.mkdtemp(prefix="steer-eval-"))
        task_dir, work_dir = root / "task", root / "work"
        task_dir.mkdir(mode=0o700)
        work_dir.mkdir(mode=0o700)
        for f in task_files:
            if f.name != "submission.py":
                shutil.copyfile(f, task_dir / f.name)
                (task_dir / f.name).chmod(stat.S_IRUSR | stat.S_IRGRP)
        task_dir.chmod(stat.S_IRUSR | stat.S_IXUSR)
        return cls(root=root, task_dir=task_dir, work_dir=work_dir, marker=secrets.token_hex(8))

    def install_candidate(self, source: bytes) -> Path:
        """Put the candidate in the read-only task copy as submission.py (a worker may already wait)."""
        self.task_dir.chmod(stat.S_IRWXU)
        path = self.task_dir / "submission.py"
        path.write_bytes(source)
        path.chmod(stat.S_IRUSR | stat.S_IRGRP)
        self.task_dir.chmod(stat.S_IRUSR | stat.S_IXUSR)
        return path

    def env(self, base: dict[str, str], visible_gpu: str, extra: dict[str, str]) -> dict[str, str]:
        env = scrub_env(base)
        env.update(extra)
        env.update({
            "HOME": str(self.work_dir),
            "TMPDIR": str(self.work_dir),
            "CUDA_VISIBLE_DEVICES": visible_gpu,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            MARKER_VAR: self.marker,
        })
        env.pop("PYTHONSTARTUP", None)
        return env

    def limit(self, pid: int, cpu_seconds: int, on_cpu: bool) -> None:
        """Apply rlimits to the started worker (before it reads its config, so before candidate code)."""
        limits = [
            (resource.RLIMIT_CPU, cpu_seconds),
            (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
            (resource.RLIMIT_NOFILE, OPEN_FILES_LIMIT),
            (resource.RLIMIT_CORE, 0),
        ]
        if nproc_enforced():
            limits.append((resource.RLIMIT_NPROC, _user_tasks() + EXTRA_TASKS))
        if on_cpu:
            limits.append((resource.RLIMIT_AS, CPU_MEMORY_LIMIT))
        for which, value in limits:
            try:
                _, hard = resource.prlimit(pid, which)
                value = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.prlimit(pid, which, (value, value))
            except (OSError, ValueError):
                pass  # the process already exited, or the platform lacks this limit

    def kill_all(self, pgid: int | None) -> int:
        """Kill the worker's process group and any process that carries this sandbox's marker."""
        killed = 0
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        # Rescan: a process that left the group may still be forking while the first pass runs.
        for _ in range(KILL_PASSES):
            found = _pids_with_env(MARKER_VAR, self.marker)
            if not found:
                break
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except (ProcessLookupError, PermissionError):
                    pass
        return killed

    def cleanup(self) -> None:
        for dirpath, dirnames, _ in os.walk(self.root):
            for d in dirnames:
                try:
                    os.chmod(os.path.join(dirpath, d), 0o700)
                except OSError:
                    pass
        try:
            os.chmod(self.task_dir, 0o700)
        except OSError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


def nproc_enforced() -> bool:
    """Root ignores RLIMIT_NPROC (even root of a user namespace did, on the 6.18 kernel tried)."""
    return os.geteuid() != 0


def _user_tasks() -> int:
    """Threads the current user runs (what RLIMIT_NPROC counts)."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                st = os.stat(entry.path)
                if st.st_uid == uid:
                    count += len(os.listdir(os.path.join(entry.path, "task")))
            except OSError:
                continue
    return count


def _pids_with_env(name: str, value: str) -> list[int]:
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(os.path.join(entry.path, "environ"), "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found
