"""Steering: every inbox line is received once, then applied or rejected; commands, prompts, /set, resume.

The end-to-end test sends `steer say` from a real subprocess while an evaluation runs.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from agent import events as ev
from agent.beam import Beam
from agent.loop import Agent, prepare_session
from agent.proposers.tune import coerce, read_knobs
from agent.session import EventLog, append_inbox, create_session
from agent.state import SessionState, fold
from agent.steering import Steering
from agent.vcs import SessionRepo
from fixtures.agent_helpers import TINY, check_record, config, events, in_thread, of_type, steer, tiny_task, wait_for


class Rig:
    """A session with two branches and the agent's steering side, without evaluations."""

    def __init__(self, tmp_path: Path):
        self.session = create_session(tmp_path, "s", {"task": "qr"})
        self.repo = SessionRepo.open_or_init(self.session.repo)
        self.log = EventLog(self.session.events_path)
        self.state = SessionState()
        self.budget: dict = {}
        for fam in ("sleepy", "steady"):
            code = (TINY / "candidates" / f"{fam}.py").read_text()
            sha = self.repo.commit(code, "seed\n", self.repo.root())
            self.repo.create_branch(f"qr/{fam}", sha)
            self.emit(ev.BranchCreated(branch=f"qr/{fam}", family=fam, sha=sha, geomean_us=100.0))
        self.steering = self.new_steering()

    def new_steering(self) -> Steering:
        beam = Beam(self.state, self.repo, self.emit, "qr")
        return Steering(self.session, self.state, beam, self.emit, self.check_set, self.set_budget, self.set_noise)

    def emit(self, e: ev.Event) -> ev.Event:
        self.log.append(e)
        self.state.apply(e)
        return e

    def check_set(self, branch: str, settings: dict) -> dict:
        space = read_knobs(self.repo.read(self.state.branches[branch].head_sha))[1]
        return {k: coerce(space, k, v) for k, v in settings.items()}

    def set_budget(self, changes: dict) -> str:
        self.budget.update(changes)
        return str(changes)

    def set_noise(self, floor: float | None) -> float:
        self.noise = floor
        return floor if floor is not None else (self.state.noise_floor or 0.01)

    def say(self, text: str, target: str | None = None, scope: str = "once") -> str:
        return append_inbox(self.session, text, target, scope)["id"]

    def outcome(self, sid: str) -> ev.Event:
        found = [e for e in events(self.session) if isinstance(e, (ev.SteeringApplied, ev.SteeringRejected))
                 and e.id == sid]
        assert found, f"{sid} has no outcome"
        return found[-1]


@pytest.fixture
def rig(tmp_path: Path):
    r = Rig(tmp_path)
    yield r
    r.log.close()
    r.repo.close()


def test_commands_apply_or_are_rejected_with_a_reason(rig: Rig):
    ids = {t: rig.say(t) for t in ["/pause sleepy", "/resume qr/sleepy", "/focus steady", "/unfocus", "/kill steady",
                                   "/fork sleepy sleepy2", "/budget iterations=50 cost=2.5", "/help",
                                   "/frobnicate", "/pause", "/pause nope", "/budget hours=abc", "/resume steady"]}
    assert rig.steering.drain() == len(ids)
    received = of_type(events(rig.session), ev.SteeringReceived)
    assert [e.id for e in received] == list(ids.values()) and all(e.kind == "command" for e in received)
    assert rig.outcome(ids["/pause sleepy"]).detail == "paused qr/sleepy"
    assert rig.outcome(ids["/fork sleepy sleepy2"]).detail.startswith("forked qr/sleepy@")
    assert "qr/sleepy2" in rig.state.branches and rig.state.focus is None
    assert rig.state.branches["qr/steady"].state == "killed"
    assert rig.budget == {"max_iterations": 50, "max_cost": 2.5}
    assert "/pause B" in rig.outcome(ids["/help"]).detail
    assert rig.outcome(ids["/frobnicate"]).reason == "unknown command /frobnicate (try /help)"
    assert rig.outcome(ids["/pause"]).reason == "usage: /pause BRANCH"
    assert "no branch 'nope'" in rig.outcome(ids["/pause nope"]).reason
    assert "needs a number" in rig.outcome(ids["/budget hours=abc"]).reason
    assert "was killed" in rig.outcome(ids["/resume steady"]).reason
    assert rig.steering.drain() == 0          # each line is read once


def test_noise_sets_shows_and_restores_the_floor(rig: Rig):
    ids = {t: rig.say(t) for t in ["/noise", "/noise measured", "/noise 2", "/noise lots", "/noise 1 2"]}
    rig.steering.drain()
    assert rig.outcome(ids["/noise"]).detail == "noise floor 1.0% (the fixed floor; none measured)"
    assert "no noise floor was measured" in rig.outcome(ids["/noise measured"]).reason
    assert "from 0 to 1 (0.02 or 2%)" in rig.outcome(ids["/noise 2"]).reason
    assert "not 'lots'" in rig.outcome(ids["/noise lots"]).reason
    assert "usage: /noise" in rig.outcome(ids["/noise 1 2"]).reason
    assert not of_type(events(rig.session), ev.NoiseFloorSet) and not hasattr(rig, "noise")

    rig.emit(ev.NoiseMeasured(floor=0.25, samples=[]))
    ids = {t: rig.say(t) for t in ["/noise 2.5%", "/noise", "/noise measured", "/noise 0.03"]}
    rig.steering.drain()
    assert rig.outcome(ids["/noise 2.5%"]).detail == "noise floor 2.5%, was 25.0% (measured)"
    assert rig.outcome(ids["/noise"]).detail == "noise floor 2.5% (set)"
    assert rig.outcome(ids["/noise measured"]).detail == "noise floor 25.0% (measured), was 2.5% (set)"
    assert rig.outcome(ids["/noise 0.03"]).detail == "noise floor 3.0%, was 25.0% (measured)"
    sets = of_type(events(rig.session), ev.NoiseFloorSet)
    assert [(e.floor, e.steering_id) for e in sets] == [(0.025, ids["/noise 2.5%"]), (None, ids["/noise measured"]),
                                                        (0.03, ids["/noise 0.03"])]
    assert rig.noise == 0.03 and fold(events(rig.session)).floor == (0.03, "set")


def test_noise_lists_the_floors_by_family_while_they_are_in_force(rig: Rig):
    rig.emit(ev.NoiseMeasured(floor=0.05, samples=[
        {"branch": "qr/sleepy", "first_us": 95.0, "again_us": 100.0, "gap": 0.05},
        {"branch": "qr/steady", "first_us": 99.8, "again_us": 100.0, "gap": 0.002}]))
    ids = {t: rig.say(t) for t in ["/noise", "/noise 2%", "/noise measured"]}
    rig.steering.drain()
    assert rig.outcome(ids["/noise"]).detail == "noise floor 5.0% (measured); by family: sleepy 5.0%, steady 1.0%"
    assert rig.outcome(ids["/noise 2%"]).detail == "noise floor 2.0%, was 5.0% (measured)"   # one floor for all
    assert rig.outcome(ids["/noise measured"]).detail == ("noise floor 5.0% (measured), was 2.0% (set); "
                                                          "by family: sleepy 5.0%, steady 1.0%")


def test_prompts_wait_for_an_iteration_of_their_target(rig: Rig):
    a = rig.say("unroll more", target="qr/sleepy")
    b = rig.say("be careful", scope="standing")
    c = rig.say("hello", target="nope")
    rig.steering.drain()
    assert "no branch 'nope'" in rig.outcome(c).reason
    steady = rig.steering.for_branch("qr/steady")
    assert [d.id for d in steady] == [b]
    sleepy = rig.steering.for_branch("qr/sleepy")
    assert {d.id for d in sleepy} == {a, b}
    rig.steering.used(sleepy, 7, "qr/sleepy")
    assert rig.outcome(a).iteration == 7 and rig.outcome(b).iteration == 7
    assert [d.id for d in rig.steering.for_branch("qr/sleepy")] == [b]     # standing stays until /drop
    d = rig.say(f"/drop {b}")
    rig.steering.drain()
    assert rig.steering.for_branch("qr/sleepy") == [] and rig.outcome(d).detail == f"dropped {b}"
    assert of_type(events(rig.session), ev.SteeringDropped)[0].id == b


def test_set_is_checked_against_the_space(rig: Rig):
    ok = rig.say("/set delay_us=100", target="sleepy")
    bad_value = rig.say("/set delay_us=5", target="sleepy")
    bad_key = rig.say("/set tile=4")
    malformed = rig.say("/set delay_us")
    rig.steering.drain()
    assert "not in SPACE (allowed: 100, 300, 1000, 2000)" in rig.outcome(bad_value).reason
    assert "'tile' is not a knob" in rig.outcome(bad_key).reason
    assert "KEY=VALUE" in rig.outcome(malformed).reason
    pending = rig.steering.for_branch("qr/sleepy")
    assert [d.id for d in pending] == [ok]
    assert rig.steering.settings_for("qr/sleepy", pending) == {"delay_us": 100}


def test_resume_continues_at_the_offset_and_restores_pending(rig: Rig):
    a = rig.say("keep going", target="qr/steady")
    rig.steering.drain()
    # a command whose steering_received was written but whose outcome was not (a crash in between)
    pause = rig.say("/pause steady")
    rig.emit(ev.SteeringReceived(id=pause, text="/pause steady", kind="command",
                                 inbox_offset=rig.session.inbox_path.stat().st_size))
    later = rig.say("/focus sleepy")
    state = fold(events(rig.session))
    rig.state = state
    again = rig.new_steering()
    again.restore()
    assert state.branches["qr/steady"].state == "paused"            # the interrupted command ran
    assert [d.id for d in again.for_branch("qr/steady")] == [a]      # the prompt is still pending
    assert again.drain() == 1 and rig.outcome(later).detail.startswith("focused on qr/sleepy")
    received = [e.id for e in of_type(events(rig.session), ev.SteeringReceived)]
    assert received.count(a) == 1 and received.count(pause) == 1


@pytest.mark.slow
def test_say_during_an_evaluation_is_used_at_the_next_boundary_and_pause_resume_work(tmp_path: Path):
    root = tmp_path / "sessions"
    task = tiny_task(tmp_path, seeds=("sleepy", "steady"))
    cfg = config(task, max_iterations=5)
    s = prepare_session(root, "live", cfg)
    agent = Agent(s, cfg)
    thread, result = in_thread(agent)
    wait_for(s, lambda es: any(isinstance(e, ev.EvalProgress) and e.iteration == 1 for e in es))
    assert steer("say", "live", "use", "less", "delay", "--branch", "sleepy", root=root).returncode == 0
    assert steer("say", "live", "/pause", "steady", root=root).returncode == 0
    wait_for(s, lambda es: any(isinstance(e, ev.EvalProgress) and e.iteration == 2 for e in es))
    assert steer("say", "live", "/abort", root=root).returncode == 0
    wait_for(s, lambda es: any(isinstance(e, ev.IterationStarted) and e.iteration == 3 for e in es))
    assert steer("say", "live", "/resume", "steady", root=root).returncode == 0
    thread.join(120)
    assert result == ["budget"]
    items = events(s)
    pos = {id(e): n for n, e in enumerate(items)}
    started = {e.iteration: e for e in of_type(items, ev.IterationStarted)}
    committed = {e.iteration: e for e in of_type(items, ev.AttemptCommitted)}
    recv = {e.text: e for e in of_type(items, ev.SteeringReceived)}
    prompt, resume = recv["use less delay"], recv["/resume steady"]
    # received at the boundary after #1, before #2 started: never in the middle of an evaluation
    assert pos[id(committed[1])] < pos[id(prompt)] < pos[id(started[2])]
    applied = [e for e in of_type(items, ev.SteeringApplied) if e.id == prompt.id]
    assert applied[0].iteration == 2
    assert started[2].branch == "tiny/sleepy" and started[3].branch == "tiny/sleepy"   # steady paused
    assert committed[2].verdict == "failed" and "aborted by /abort" in committed[2].reason
    assert "aborted the evaluation of #2" in [e.detail for e in of_type(items, ev.SteeringApplied)
                                              if e.id == recv["/abort"].id][0]
    after_resume = [e.branch for e in of_type(items, ev.IterationStarted) if pos[id(e)] > pos[id(resume)]]
    assert "tiny/steady" in after_resume
    check_record(s)
