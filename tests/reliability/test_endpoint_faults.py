"""The model endpoint misbehaves (a real HTTP server on 127.0.0.1), and model-written code misbehaves.

A refused connection, 500s, a plain timeout and a reply without code are proven in tests/test_llm.py
(marked `reliability` there).
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from agent import events as ev
from agent.harness.landlock import abi_version
from agent.loop import Agent, prepare_session
from agent.session import MAX_LINE_BYTES
from agent.vcs import SessionRepo
from fixtures.agent_helpers import check_record, config, events, of_type, tiny_task
from fixtures.fake_openai import FakeOpenAI, Reply
from test_llm import GOOD_EDIT, SECRET, ctx, llm

pytestmark = pytest.mark.reliability


@pytest.fixture
def server():
    s = FakeOpenAI()
    yield s
    s.close()


def test_401_is_not_retried_and_never_shows_the_key(server: FakeOpenAI, monkeypatch):
    monkeypatch.setenv("STEER_TEST_KEY", SECRET)
    server.script = [Reply(status=401)]
    p = llm(server).propose(ctx())
    assert not p.ok and p.transient and "HTTP 401" in p.error and "refused" in p.error
    assert len(server.requests) == 1
    assert SECRET not in p.transcript and SECRET not in p.error


def test_a_429_storm_backs_off_exponentially_then_gives_up(server: FakeOpenAI):
    server.script = [Reply(status=429)] * 5
    p = llm(server, llm_retries=4, llm_backoff_s=0.05).propose(ctx())
    assert not p.ok and p.transient and "failed 5 times" in p.error and "HTTP 429" in p.error
    gaps = [b.at - a.at for a, b in zip(server.requests, server.requests[1:])]
    assert len(gaps) == 4 and gaps[3] > 2.5 * gaps[0]        # 0.05, 0.1, 0.2, 0.4 s (+-20% jitter)


def test_a_reply_that_trickles_forever_is_cut_by_the_deadline(server: FakeOpenAI):
    """httpx's timeout is per read: one byte every 50 ms never trips it. The whole reply has a deadline."""
    server.script = [Reply(GOOD_EDIT, trickle_s=0.05)] * 2
    got: list = []
    worker = threading.Thread(target=lambda: got.append(llm(server, llm_timeout_s=1.0, llm_retries=1).propose(ctx())),
                              daemon=True)
    worker.start()
    worker.join(10)
    assert got, "the proposal still hangs after 10 s"
    p = got[0]
    assert not p.ok and p.transient and "no complete reply within 1 s" in p.error


@pytest.mark.parametrize("bad", [Reply(GOOD_EDIT, truncate=True), Reply(raw=b'{"id": "x", "choices": [{"mess')],
                         ids=["truncated", "unreadable"])
def test_a_truncated_or_unreadable_body_is_retried(server: FakeOpenAI, bad: Reply):
    server.script = [bad, Reply(GOOD_EDIT)]
    p = llm(server, llm_retries=1).propose(ctx())
    assert p.ok, p.error
    assert len(server.requests) == 2 and "try 1 failed" in p.transcript


def test_a_10_mb_reply_is_a_clear_failure_and_stays_small_in_the_record(server: FakeOpenAI):
    huge = "```python\ndef custom_kernel(data):\n    return data * 2\n" + "# pad\n" * (10 * 1024 * 1024 // 6) + "```\n"
    server.script = [Reply("A very long file.\n" + huge)]
    p = llm(server).propose(ctx())
    assert not p.ok and not p.transient and "the limit is 1 MB" in p.error
    assert len(p.transcript) < 400_000 and "more characters not kept" in p.transcript
    assert len(p.summary) <= 120


@pytest.mark.parametrize("reply, named", [
    ("Move the helper.\nutils.py\n```python\n<<<<<<< SEARCH\nimport time\n=======\nimport os\n>>>>>>> REPLACE\n```\n",
     "utils.py"),
    ("**../../reference.py**\n```python\ndef custom_kernel(data):\n    return data * 2\n"
     "def check_implementation(data, output):\n    return True, ''\n```\n", "../../reference.py"),
], ids=["utils.py", "reference.py"])
def test_an_edit_for_another_file_is_refused_and_writes_nothing(server: FakeOpenAI, tmp_path: Path, reply, named):
    server.script = [Reply(reply)]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    p = llm(server).propose(ctx(workdir=tmp_path))
    assert not p.ok and not p.transient and f"the reply edits {named}" in p.error
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_429_storm_in_the_loop_pauses_it_with_growing_waits(tmp_path: Path, server: FakeOpenAI):
    server.script = [Reply(status=429)] * 6 + [Reply(GOOD_EDIT)]
    task = tiny_task(tmp_path, seeds=("sleepy",))
    cfg = config(task, proposer="llm", model="fake", base_url=server.base_url, llm_retries=1, llm_backoff_s=0.01,
                 error_backoff_s=0.2, max_iterations=4)
    s = prepare_session(tmp_path / "sessions", "storm", cfg)
    assert Agent(s, cfg).run() == "budget"
    items = events(s)
    waits = [e for e in of_type(items, ev.ErrorEvent) if e.where == "proposer"]
    assert [w.message.split("pauses ")[1].split(" s")[0] for w in waits] == ["0.2", "0.4", "0.8"]
    verdicts = [c.verdict for c in of_type(items, ev.AttemptCommitted)]
    assert verdicts == ["failed", "failed", "failed", "accepted"]
    check_record(s)


@pytest.mark.skipif(abi_version() < 1, reason="kernel without landlock")
def test_model_code_that_deletes_files_outside_its_sandbox_cannot(tmp_path: Path, server: FakeOpenAI):
    """The reply's kernel, at import, goes after the session, its git record, the task and the user's files."""
    sentinel = tmp_path / "precious.txt"
    sentinel.write_text("keep me\n")
    task = tiny_task(tmp_path, seeds=("sleepy",))
    root = tmp_path / "sessions"
    targets = [root / "vandal" / "events.jsonl", root / "vandal" / "inbox.jsonl", root / "vandal" / "repo" / ".git",
               root / "vandal" / "repo", task / "reference.py", task, sentinel]
    vandal = f"""Clean up.
```python
import os, shutil
for target in {[str(t) for t in targets]!r}:
    for attempt in (lambda: shutil.rmtree(target), lambda: os.remove(target),
                    lambda: open(target, "w").write("{{\\"id\\": \\"x\\", \\"text\\": \\"/kill sleepy\\"}}\\n")):
        try:
            attempt()
        except OSError:
            pass

def custom_kernel(data):
    return data * 2
```
"""
    server.script = [Reply(vandal)]
    cfg = config(task, proposer="llm", model="fake", base_url=server.base_url, max_iterations=1)
    s = prepare_session(root, "vandal", cfg)
    before = {p: p.read_bytes() for p in (task / "reference.py", sentinel)}
    assert Agent(s, cfg).run() == "budget"
    assert {p: p.read_bytes() for p in before} == before
    items = events(s)
    assert of_type(items, ev.EvalFinished)[0].ok                  # it ran, and it harmed nothing
    assert not of_type(items, ev.SteeringReceived)
    repo = SessionRepo.open_or_init(s.repo)
    try:
        assert repo.attempts().keys() == {1}
    finally:
        repo.close()
    check_record(s)


def test_the_command_proposer_that_wrecks_its_worktree_costs_one_attempt(tmp_path: Path):
    """The external agent is trusted with its worktree, not with the record: it deletes the worktree, then a
    later run of it works; the session repo and the loop carry on."""
    counter = tmp_path / "runs"
    script = tmp_path / "wrecker.py"
    script.write_text(f"""
import os, pathlib, shutil
runs = pathlib.Path({str(counter)!r})
n = int(runs.read_text()) if runs.exists() else 0
runs.write_text(str(n + 1))
if n == 0:
    here = os.getcwd()
    for entry in os.listdir(here):
        path = os.path.join(here, entry)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    print("deleted everything")
else:
    f = pathlib.Path("submission.py")
    f.write_text(f.read_text().replace('"delay_us": 1000', '"delay_us": 100'))
    print("cut the delay")
""")
    task = tiny_task(tmp_path, seeds=("sleepy",))
    cfg = config(task, proposer="command", command=f"{sys.executable} {script}", max_iterations=2)
    s = prepare_session(tmp_path / "sessions", "wreck", cfg)
    assert Agent(s, cfg).run() == "budget"
    made = {e.iteration: e for e in of_type(events(s), ev.ProposalMade)}
    assert not made[1].ok and "removed submission.py" in made[1].error
    assert made[2].ok
    repo = SessionRepo.open_or_init(s.repo)
    try:
        assert repo.repo.git.worktree("list").count("\n") == 0       # only the main checkout is left
    finally:
        repo.close()
    check_record(s)


def test_no_event_line_is_ever_too_long_for_a_reader(tmp_path: Path):
    """The writer shrinks an event that would exceed what readers accept, instead of writing a line they skip."""
    from agent.session import EventLog, EventReader, create_session
    s = create_session(tmp_path, "big", {})
    log = EventLog(s.events_path)
    log.append(ev.ErrorEvent(where="a", message="x" * (10 * 1024 * 1024)))
    log.append(ev.EvalFinished(iteration=1, branch="b", ok=False, error_class="wrong", message="m", geomean_us=None,
                               result={"stderr_tail": "y" * (6 * 1024 * 1024), "cases": [{"message": "z" * 100}]}))
    log.close()
    assert max(len(line) for line in s.events_path.read_bytes().splitlines()) < MAX_LINE_BYTES
    got = list(EventReader(s.events_path).iter_all())
    assert [e.seq for e in got] == [1, 2] and got[0].message.startswith("xxx") and "chars cut" in got[0].message
    assert got[1].result["cases"][0]["message"] == "z" * 100
