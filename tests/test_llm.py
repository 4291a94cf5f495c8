"""The llm proposer against a real OpenAI-compatible HTTP server on 127.0.0.1 with scripted replies."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent import events as ev
from agent.config import RunConfig
from agent.loop import Agent, prepare_session
from agent.proposers.base import AttemptInfo, ProposalContext
from agent.proposers.edits import apply_edits, parse_blocks, parse_reply
from agent.proposers.llm import LlmProposer
from agent.session import append_inbox
from fixtures.agent_helpers import TINY, check_record, config, events, of_type, tiny_task
from fixtures.fake_openai import FakeOpenAI, Reply

SECRET = "sk-test-do-not-leak-4242"
SEED = (TINY / "candidates" / "sleepy.py").read_text()
CONFIG_LINE = 'CONFIG = {"delay_us": 1000, "copies": 1}  # the tuner rewrites this line'
GOOD_EDIT = f"""Shorten the delay: the sleep dominates.

<<<<<<< SEARCH
{CONFIG_LINE}
=======
CONFIG = {{"delay_us": 100, "copies": 1}}
>>>>>>> REPLACE
"""
BAD_EDIT = """Try this.
<<<<<<< SEARCH
this line is not in the file
=======
nothing
>>>>>>> REPLACE
"""
SYNTAX = "Rewrite:\n```python\ndef custom_kernel(data):\n    return data *\n```\n"
NO_CODE = "I think you should use shared memory, but I will not write code."


@pytest.fixture
def server():
    s = FakeOpenAI()
    yield s
    s.close()


# -- parsing replies -----------------------------------------------------------------------------
def test_search_replace_blocks_apply_in_order():
    edits, err = parse_blocks(GOOD_EDIT)
    assert err is None and len(edits) == 1
    code, err = apply_edits(SEED, edits)
    assert err is None and '"delay_us": 100' in code and code.count("CONFIG =") == SEED.count("CONFIG =")


def test_whole_file_and_unusable_replies():
    whole = parse_reply("Here:\n```python\nimport torch\n\ndef custom_kernel(data):\n    return data * 2\n```", SEED)
    assert whole.how == "file" and whole.code.startswith("import torch")
    assert "no SEARCH/REPLACE" in parse_reply(NO_CODE, SEED).error
    assert "does not match" in parse_reply(BAD_EDIT, SEED).error
    assert "empty" in parse_reply("  ", SEED).error
    assert "no >>>>>>> REPLACE" in parse_reply("<<<<<<< SEARCH\na\n=======\nb\n", SEED).error
    twice = "<<<<<<< SEARCH\nimport time\n=======\nimport os\n>>>>>>> REPLACE\n"
    assert parse_reply(twice, SEED + "\nimport time\n").error.endswith("matches 2 places; it must match exactly one")
    trailing = f"<<<<<<< SEARCH\n{CONFIG_LINE}   \n=======\nCONFIG = {{}}\n>>>>>>> REPLACE\n"
    assert parse_reply(trailing, SEED).code is not None         # trailing whitespace is forgiven


# -- the proposer --------------------------------------------------------------------------------
def llm(server: FakeOpenAI, **kw) -> LlmProposer:
    base = dict(proposer="llm", model="fake-model", base_url=server.base_url, api_key_env="STEER_TEST_KEY",
                llm_retries=2, llm_backoff_s=0.05, llm_timeout_s=5.0, price_in_per_mtok=2.0, price_out_per_mtok=8.0)
    base.update(kw)
    return LlmProposer(RunConfig(**base))


def ctx(**kw) -> ProposalContext:
    base = dict(iteration=7, branch="qr/sleepy", family="sleepy", task_name="tiny", task_description="Double it.",
                parent_sha="0" * 40, code=SEED, head_us=1000.0, baseline_us=2000.0,
                history=[AttemptInfo(5, "accepted", "one copy", 1000.0, "", "s5", margin=0.42),
                         AttemptInfo(6, "failed", "tried copies", None, "wrong: mismatch", "s6")],
                others=["qr/steady (steady): 800.00 µs"], notes=["prefer fewer copies"], settings={"copies": 1})
    base.update(kw)
    return ProposalContext(**base)


def test_a_good_edit_with_tokens_cost_and_the_prompt(server: FakeOpenAI, monkeypatch):
    monkeypatch.setenv("STEER_TEST_KEY", SECRET)
    server.script = [Reply(GOOD_EDIT, prompt_tokens=1000, completion_tokens=500)]
    p = llm(server).propose(ctx())
    assert p.ok and '"delay_us": 100' in p.code and p.summary == "Shorten the delay: the sleep dominates."
    assert (p.tokens_in, p.tokens_out) == (1000, 500) and p.cost_usd == pytest.approx((1000 * 2 + 500 * 8) / 1e6)
    req = server.requests[0]
    assert req.path == "/v1/chat/completions" and req.body["model"] == "fake-model"
    assert req.headers["authorization"] == f"Bearer {SECRET}"
    for part in ("Double it.", "algorithm family: sleepy", CONFIG_LINE, "#6 failed", "wrong: mismatch",
                 "#5 accepted 1000.00 µs (accuracy 42%) one copy", "a kernel near the limit may fail on other inputs",
                 "qr/steady (steady): 800.00 µs", "prefer fewer copies", "CONFIG['copies'] = 1", "SEARCH"):
        assert part in req.prompt, part
    assert SECRET not in p.transcript


@pytest.mark.reliability
def test_429_then_success_retries(server: FakeOpenAI):
    server.script = [Reply(status=429), Reply(GOOD_EDIT)]
    p = llm(server).propose(ctx())
    assert p.ok and len(server.requests) == 2 and "HTTP 429" in p.transcript


@pytest.mark.reliability
def test_500_until_the_limit_gives_a_transient_failure(server: FakeOpenAI):
    server.script = [Reply(status=500)] * 3
    p = llm(server, llm_retries=2).propose(ctx())
    assert not p.ok and p.transient and "failed 3 times" in p.error and "HTTP 500" in p.error
    assert len(server.requests) == 3


@pytest.mark.reliability
def test_a_timeout_is_retried_then_given_up(server: FakeOpenAI):
    server.script = [Reply(GOOD_EDIT, delay=2.0)] * 2
    t0 = time.monotonic()
    p = llm(server, llm_timeout_s=0.4, llm_retries=1).propose(ctx())
    assert not p.ok and p.transient and "timed out" in p.error
    assert time.monotonic() - t0 < 4


@pytest.mark.reliability
def test_unusable_replies_are_failed_proposals_not_transient(server: FakeOpenAI):
    server.script = [Reply(NO_CODE), Reply(BAD_EDIT)]
    for expected in ("no SEARCH/REPLACE block", "does not match the current code"):
        p = llm(server).propose(ctx())
        assert not p.ok and not p.transient and expected in p.error and p.tokens_in == 100


@pytest.mark.reliability
def test_a_dead_endpoint_is_a_clear_transient_failure():
    p = LlmProposer(RunConfig(proposer="llm", model="m", base_url="http://127.0.0.1:9/v1", llm_retries=0,
                              llm_timeout_s=2)).propose(ctx())
    assert not p.ok and p.transient and "cannot reach the endpoint" in p.error


# -- in the loop ----------------------------------------------------------------------------------
@pytest.mark.reliability
@pytest.mark.slow
def test_llm_loop_backs_off_records_failures_prefetches_and_never_leaks_the_key(tmp_path: Path, server: FakeOpenAI,
                                                                                monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server.script = [Reply(status=500), Reply(status=500), Reply(SYNTAX), Reply(NO_CODE), Reply(BAD_EDIT),
                     Reply(GOOD_EDIT, prompt_tokens=2000, completion_tokens=1000)]
    task = tiny_task(tmp_path, seeds=("sleepy",))
    cfg = config(task, proposer="llm", model="fake", base_url=server.base_url, llm_retries=1, llm_backoff_s=0.05,
                 error_backoff_s=0.3, max_iterations=6, price_in_per_mtok=1.0, price_out_per_mtok=1.0)
    s = prepare_session(tmp_path / "sessions", "llm", cfg)
    append_inbox(s, "keep it simple", target=None)
    assert Agent(s, cfg).run() == "budget"
    items = events(s)
    made = {e.iteration: e for e in of_type(items, ev.ProposalMade)}
    done = {e.iteration: e for e in of_type(items, ev.EvalFinished)}
    commits = {e.iteration: e for e in of_type(items, ev.AttemptCommitted)}
    assert made[1].transient and "HTTP 500" in made[1].error and commits[1].verdict == "failed"
    assert any(e.where == "proposer" and "pauses" in e.message for e in of_type(items, ev.ErrorEvent))
    assert done[2].error_class == "syntax" and commits[2].verdict == "failed"
    assert "no SEARCH/REPLACE" in made[3].error and "does not match" in made[4].error
    assert commits[5].verdict == "accepted" and made[5].tokens_in == 2000
    assert made[5].cost_usd == pytest.approx(3000 / 1e6)
    # the steering note reached the first prompt that produced an attempt, and was applied there
    applied = of_type(items, ev.SteeringApplied)
    assert applied and applied[0].iteration == 2 and "keep it simple" in server.requests[2].prompt
    # the proposal for #6 was prefetched while #5 was evaluated, then discarded because #5 moved the head
    assert len(server.requests) == 8 and server.requests[6].at < done[5].ts
    assert "discarded" in (s.dir / "artifacts" / "6" / "transcript.txt").read_text()
    assert made[6].tokens_in == 200       # its own 100 plus the discarded prefetch's 100
    for path in s.dir.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            assert SECRET.encode() not in path.read_bytes(), path
    check_record(s)
