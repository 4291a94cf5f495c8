"""The tune proposer: AST rewrite of CONFIG, seeded moves inside SPACE, no repeats, /set."""
from __future__ import annotations

import ast
import textwrap

import pytest

from agent.proposers.base import AttemptInfo, ProposalContext
from agent.proposers.tune import KnobError, TuneProposer, coerce, read_knobs, write_config

SOURCE = textwrap.dedent('''\
    """A kernel with knobs."""
    import math

    # block sizes: keep these powers of two
    CONFIG = {
        "BLOCK": 32,   # rows per program
        "WARPS": 4,
        "NAME": "fast",
    }
    SPACE = {"BLOCK": [16, 32, 64, 128], "WARPS": [2, 4, 8], "NAME": ["fast", "safe"]}


    def custom_kernel(data):
        return data  # CONFIG = {"BLOCK": 1} in a comment is not the literal
''')


def ctx(code: str, history=(), iteration: int = 1, settings=None, codes=None) -> ProposalContext:
    return ProposalContext(iteration=iteration, branch="qr/x", family="x", task_name="qr", task_description="",
                           parent_sha="p" * 40, code=code, history=list(history), settings=settings or {},
                           read_code=(codes or {}).__getitem__)


def test_read_knobs_and_errors():
    config, space = read_knobs(SOURCE)
    assert config == {"BLOCK": 32, "WARPS": 4, "NAME": "fast"}
    assert space["WARPS"] == [2, 4, 8]
    with pytest.raises(KnobError, match="declares no module-level CONFIG"):
        read_knobs("def custom_kernel(d):\n    return d\n")
    with pytest.raises(KnobError, match="not a literal"):
        read_knobs("CONFIG = dict(a=1)\nSPACE = {'a': [1]}\n")
    with pytest.raises(KnobError, match="does not parse"):
        read_knobs("CONFIG = {\n")


def test_write_config_changes_only_the_literal():
    out = write_config(SOURCE, {"BLOCK": 64, "WARPS": 4, "NAME": "safe"})
    assert read_knobs(out)[0] == {"BLOCK": 64, "WARPS": 4, "NAME": "safe"}
    before, after = SOURCE.split("CONFIG = {")[0], SOURCE.split("SPACE = ")[1]
    assert out.startswith(before) and out.endswith(after)
    assert "# block sizes: keep these powers of two" in out
    assert 'CONFIG = {"BLOCK": 1} in a comment' in out
    ast.parse(out)


def test_write_config_handles_non_ascii_before_the_literal():
    src = 'NOTE = "µs and ünïcode"; CONFIG = {"a": 1}\nSPACE = {"a": [1, 2]}\n'
    out = write_config(src, {"a": 2})
    assert out == 'NOTE = "µs and ünïcode"; CONFIG = {\'a\': 2}\nSPACE = {"a": [1, 2]}\n'


def test_never_repeats_a_configuration_and_is_seeded():
    tuner = TuneProposer(seed=3)
    code, codes, history, seen = SOURCE, {}, [], {repr(read_knobs(SOURCE)[0])}
    for i in range(1, 24):    # 4 * 3 * 2 = 24 configurations, the head is one of them
        p = tuner.propose(ctx(code, history, iteration=i, codes=codes))
        assert p.ok, p.error
        cfg = read_knobs(p.code)[0]
        assert repr(cfg) not in seen, f"repeated {cfg} at {i}"
        seen.add(repr(cfg))
        sha = f"sha{i}"
        codes[sha] = p.code
        history.append(AttemptInfo(i, "rejected", p.summary, 1.0, "", sha))
    p = tuner.propose(ctx(code, history, iteration=25, codes=codes))
    assert not p.ok and p.exhausted and "exhausted" in p.error
    a = TuneProposer(seed=7).propose(ctx(SOURCE, iteration=5))
    b = TuneProposer(seed=7).propose(ctx(SOURCE, iteration=5))
    assert a.code == b.code and a.summary == b.summary


def test_tried_configs_come_from_history_so_a_new_tuner_keeps_them():
    first = TuneProposer(seed=0).propose(ctx(SOURCE, iteration=1))
    again = TuneProposer(seed=0).propose(ctx(SOURCE, [AttemptInfo(1, "rejected", "", 1.0, "", "s1")], iteration=1,
                                             codes={"s1": first.code}))
    assert read_knobs(again.code)[0] != read_knobs(first.code)[0]


def test_set_forces_values_and_coerce_rejects_bad_ones():
    p = TuneProposer().propose(ctx(SOURCE, settings={"BLOCK": 128}))
    assert read_knobs(p.code)[0]["BLOCK"] == 128 and "steering /set" in p.summary
    # once /set's configuration was tried, the other knobs move and BLOCK stays
    codes = {"s1": p.code}
    q = TuneProposer().propose(ctx(SOURCE, [AttemptInfo(1, "rejected", "", 1.0, "", "s1")], settings={"BLOCK": 128},
                                   codes=codes))
    assert read_knobs(q.code)[0]["BLOCK"] == 128 and read_knobs(q.code)[0] != read_knobs(p.code)[0]
    space = read_knobs(SOURCE)[1]
    assert coerce(space, "BLOCK", "64") == 64
    assert coerce(space, "NAME", "safe") == "safe"
    with pytest.raises(KnobError, match="not in SPACE"):
        coerce(space, "BLOCK", "48")
    with pytest.raises(KnobError, match="not a knob"):
        coerce(space, "TILE", "1")


def test_no_knobs_is_a_failed_proposal_with_the_reason():
    p = TuneProposer().propose(ctx("def custom_kernel(d):\n    return d\n"))
    assert not p.ok and "CONFIG" in p.error and not p.exhausted
