"""Candidate code that misbehaves: each is contained, classified, and leaves the caller and the machine as they were.

The scenarios tests/test_harness.py already proves (infinite loop, os._exit, segfault, sys.exit,
exceptions at import, 100 MB of output, a forked child, the read-only task copy, the session
directory under landlock, secrets in os.environ) are marked `reliability` there.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.harness.landlock import abi_version
from agent.harness.sandbox import EXTRA_TASKS, nproc_enforced
from agent.harness.task import REPO_ROOT
from reliability.harness_helpers import GEQRF, run, source

pytestmark = pytest.mark.reliability


def test_a_sleep_just_under_the_limit_in_every_stage_passes(small_qr_task, candidate):
    """Each stage has its own limit: half of it spent in each of smoke, tests and the bench (a fifth
    in the import), over twice the limit in all, is no timeout. The import stage's clock starts
    with the worker process, so it also pays for Python and torch starting: 2.2-3.3 s on the 2-core
    development machine on a slow day, where a 2.5 s limit with 1.5 s of sleep timed out in two
    fresh-clone runs; so its sleep is the smaller one."""
    limit = 6.0
    r, wall = run(candidate(f"""
        import time, torch
        time.sleep({0.2 * limit})                       # import
        SLEEPS = {{1: {0.5 * limit}, 2: {0.5 * limit}, 3: {0.4 * limit}}}   # smoke, tests, bench warm-up
        calls = [0]
        def custom_kernel(data):
            calls[0] += 1
            time.sleep(SLEEPS.get(calls[0], 0.0))
            return torch.geqrf(data)
    """), small_qr_task, stage_timeout=limit)
    assert r.ok, (r.error_class, r.message, r.stage_s)
    assert r.stage_s["import"] > 0.2 * limit, r.stage_s
    assert all(r.stage_s[s] > 0.35 * limit for s in ("smoke", "tests", "bench")), r.stage_s
    assert wall > 1.5 * limit


def test_an_import_that_never_returns_times_out_in_the_import_stage(small_qr_task, candidate):
    r, wall = run(candidate("while True:\n    pass\n"), small_qr_task, stage_timeout=2.0)
    assert r.error_class == "timeout" and r.stage == "import", r.message
    assert wall < 2.0 + 15


def test_a_1_gb_allocation_is_fine_and_one_past_the_address_limit_is_an_exception(small_qr_task, candidate):
    big, _ = run(candidate("""
        import torch
        ballast = torch.ones(256 * 1024 * 1024)        # 1 GiB, every page touched
        def custom_kernel(data):
            return torch.geqrf(data)
    """), small_qr_task)
    assert big.ok, big.message
    huge, _ = run(candidate("""
        import torch
        def custom_kernel(data):
            hog = torch.empty(64 << 30, dtype=torch.uint8)   # past the 16 GiB address-space limit
            return torch.geqrf(data)
    """), small_qr_task)
    assert huge.error_class == "exception" and huge.stage == "smoke", huge.message
    assert "memory" in huge.message.lower()


def test_a_huge_output_tensor_is_wrong_not_a_crash(small_qr_task, candidate):
    r, wall = run(candidate("""
        import torch
        def custom_kernel(data):
            return torch.empty(1 << 30), torch.empty(1 << 30)   # 4 GiB each, never touched
    """), small_qr_task)
    assert r.error_class == "wrong" and "shape" in r.message, r.message
    assert wall < 30


def test_exhausting_file_descriptors_stays_inside_the_worker(small_qr_task, candidate):
    before = len(os.listdir("/proc/self/fd"))
    r, _ = run(candidate("""
        import errno, sys, torch
        held = []
        try:
            while True:
                held.append(open("/dev/null"))
        except OSError as exc:
            print("EMFILE after", len(held), exc.errno == errno.EMFILE, file=sys.stderr)
        def custom_kernel(data):
            return torch.geqrf(data)
    """), small_qr_task)
    assert r.ok, r.message
    count = int(r.stderr_tail.split("EMFILE after ")[1].split()[0])
    assert 100 < count <= 4096 and "True" in r.stderr_tail
    assert len(os.listdir("/proc/self/fd")) <= before + 2      # the caller leaked nothing


def test_a_candidate_cannot_lift_its_rlimits_nor_keep_root_capabilities(small_qr_task, candidate):
    """As root it could (CAP_SYS_RESOURCE) until the worker dropped its capabilities, for good."""
    r, _ = run(candidate("""
        import os, resource, torch
        status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
        kept = [k for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb") if int(status[k], 16)]
        if os.geteuid() == 0 and kept:
            raise RuntimeError("root kept capabilities: " + ", ".join(kept))
        lifted = []
        for name in ("RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_FSIZE"):
            which = getattr(resource, name)
            soft, hard = resource.getrlimit(which)
            if hard == resource.RLIM_INFINITY:
                continue
            try:
                resource.setrlimit(which, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                lifted.append(name)
            except (ValueError, OSError):
                pass
        if lifted:
            raise RuntimeError("lifted " + ", ".join(lifted))
        def custom_kernel(data):
            return torch.geqrf(data)
    """), small_qr_task)
    assert r.ok, r.message


@pytest.fixture
def repo_sentinel():
    """A directory inside Steer's own tree (not a real source file: if confinement ever failed, nothing is lost)."""
    d = REPO_ROOT / "tests" / "reliability" / f"_sentinel_{os.getpid()}"
    d.mkdir()
    (d / "reference.py").write_text("kept = True\n")
    (d / "task.yml").write_text("kept: true\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(abi_version() < 1, reason="kernel without landlock")
def test_writes_into_the_task_directory_and_the_repository_are_refused(small_qr_task, candidate, repo_sentinel):
    """The read-only copy is one half; the original task directory and Steer's own tree are the other."""
    targets = [small_qr_task.path, repo_sentinel]
    before = {t: sorted((p.name, p.read_bytes()) for p in t.iterdir() if p.is_file()) for t in targets}
    r, _ = run(candidate(source(f"""
        import os, shutil, torch
        for target in {[str(t) for t in targets]!r}:
            for attempt in (lambda: open(os.path.join(target, "reference.py"), "a").write("# tampered"),
                            lambda: open(os.path.join(target, "planted.py"), "w").write("x = 1"),
                            lambda: os.remove(os.path.join(target, "task.yml")),
                            lambda: os.rename(os.path.join(target, "reference.py"), os.path.join(target, "x")),
                            lambda: shutil.rmtree(target)):
                try:
                    attempt()
                except OSError:
                    pass
    """, GEQRF)), small_qr_task)
    assert r.ok, r.message
    assert {t: sorted((p.name, p.read_bytes()) for p in t.iterdir() if p.is_file()) for t in targets} == before


LEAK_PROBE = """
import os, sys
from agent.harness.runner import EvalOptions, evaluate
from agent.harness.task import load_task
r = evaluate(sys.argv[1], load_task(sys.argv[2]), EvalOptions(device="cpu", stage_timeout=8))
print(json.dumps(r.to_json()))
""".replace("import os, sys", "import json, os, sys")


def test_secrets_cannot_be_read_from_the_agent_process(small_qr_task, candidate):
    """Not in the candidate's environment, nor in its parent's /proc/<pid>/environ or memory."""
    secret = "sk-reliability-secret-7f3a"
    probe = candidate("""
        import os, torch
        found = [k for k, v in os.environ.items() if "sk-reliability" in v]
        for path in (f"/proc/{os.getppid()}/environ", f"/proc/{os.getppid()}/mem"):
            try:
                with open(path, "rb") as f:
                    data = f.read(1 << 20)
                found += [path] if b"sk-reliability" in data or path.endswith("mem") else []
            except OSError:
                pass
        if found:
            raise RuntimeError("read secrets from " + ", ".join(found))
        def custom_kernel(data):
            return torch.geqrf(data)
    """)
    env = {**os.environ, "OPENAI_API_KEY": secret, "HF_TOKEN": secret, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", LEAK_PROBE, str(probe), str(small_qr_task.path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ok"], result["message"]
    assert secret not in out.stdout


@pytest.mark.skipif(not nproc_enforced(), reason="root ignores RLIMIT_NPROC: a flood would not be bounded")
def test_a_process_flood_is_bounded_by_rlimit_nproc_and_killed(small_qr_task, candidate):
    r, _ = run(candidate("""
        import os, sys, torch
        spawned = []
        try:
            while len(spawned) < 100000:
                spawned.append(os.posix_spawn("/bin/sleep", ["sleep", "600"], os.environ))
        except OSError:
            pass
        print("SPAWNED", len(spawned), spawned[-1] if spawned else 0, file=sys.stderr, flush=True)
        def custom_kernel(data):
            return torch.geqrf(data)
    """), small_qr_task, stage_timeout=60.0)
    count, last = (int(x) for x in r.stderr_tail.split("SPAWNED ")[1].split()[:2])
    assert 100 < count <= EXTRA_TASKS + 500      # bounded (other tasks of the user share the limit)
    assert not Path(f"/proc/{last}").exists() or b"sleep" not in Path(f"/proc/{last}/cmdline").read_bytes()
