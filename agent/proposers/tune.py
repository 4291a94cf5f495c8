"""The `tune` proposer: explore a candidate's declared knobs, no network.

A candidate declares `CONFIG = {...}` (current values) and `SPACE = {...}` (allowed values per
key) as module-level literals. The tuner rewrites the CONFIG literal through the `ast` module
(locating the node, splicing a freshly unparsed dict), so comments and the rest of the file are
untouched. Moves: coordinate steps to a neighbouring value, and seeded random jumps; a
configuration already tried on the branch (its head or any attempt) is never proposed again.
"""
from __future__ import annotations

import ast
import itertools
import json
import random
import threading
from typing import Any

from agent.proposers.base import Proposal, ProposalContext

JUMP_PROBABILITY = 0.2
JUMP_TRIES = 200
ENUMERATE_LIMIT = 50_000


class KnobError(ValueError):
    """The candidate has no usable CONFIG/SPACE; the message says what is missing."""


def _find_dict(tree: ast.Module, name: str) -> ast.Assign | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id == name:
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                and node.value is not None:
            return node  # type: ignore[return-value]
    return None


def read_knobs(code: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """(CONFIG, SPACE) as Python values; KnobError when either is missing or not a literal."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise KnobError(f"the candidate does not parse (line {exc.lineno}: {exc.msg})") from None
    found: dict[str, Any] = {}
    for name in ("CONFIG", "SPACE"):
        node = _find_dict(tree, name)
        if node is None:
            raise KnobError(f"the candidate declares no module-level {name} = {{...}}; tune needs CONFIG and SPACE")
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            raise KnobError(f"{name} is not a literal dict (tune rewrites literals only)") from None
        if not isinstance(value, dict):
            raise KnobError(f"{name} is not a dict")
        found[name] = value
    space = {k: list(v) for k, v in found["SPACE"].items() if isinstance(v, (list, tuple)) and v}
    if not any(k in found["CONFIG"] for k in space):
        raise KnobError("SPACE names no key of CONFIG with a non-empty list of values")
    return found["CONFIG"], space


def write_config(code: str, config: dict[str, Any]) -> str:
    """The source with the CONFIG literal replaced by `config` (key order kept); nothing else changes."""
    tree = ast.parse(code)
    node = _find_dict(tree, "CONFIG")
    if node is None or node.value is None:
        raise KnobError("no CONFIG to rewrite")
    value = node.value
    literal = ast.Dict(keys=[ast.Constant(k) for k in config], values=[_to_node(v) for v in config.values()])
    new_text = ast.unparse(literal).encode()
    # ast offsets are in UTF-8 bytes, per line
    lines = code.encode().splitlines(keepends=True)
    starts = list(itertools.accumulate((len(line) for line in lines), initial=0))
    begin = starts[value.lineno - 1] + value.col_offset
    end = starts[value.end_lineno - 1] + value.end_col_offset  # type: ignore[operator]
    data = code.encode()
    out = (data[:begin] + new_text + data[end:]).decode()
    if ast.literal_eval(_find_dict(ast.parse(out), "CONFIG").value) != config:  # type: ignore[union-attr]
        raise KnobError("rewriting CONFIG did not round-trip")
    return out


def _to_node(v: Any) -> ast.expr:
    if isinstance(v, (list, tuple)):
        elts = [_to_node(x) for x in v]
        return ast.Tuple(elts=elts, ctx=ast.Load()) if isinstance(v, tuple) else ast.List(elts=elts, ctx=ast.Load())
    if isinstance(v, dict):
        return ast.Dict(keys=[ast.Constant(k) for k in v], values=[_to_node(x) for x in v.values()])
    return ast.Constant(v)


def config_key(config: dict[str, Any], keys: list[str]) -> str:
    return json.dumps([[k, config.get(k)] for k in sorted(keys)], default=repr)


def coerce(space: dict[str, list[Any]], key: str, text: str) -> Any:
    """A `/set key=value` value as the SPACE entry it names; KnobError with the allowed values if none."""
    if key not in space:
        raise KnobError(f"{key!r} is not a knob of this candidate (SPACE has {', '.join(space) or 'none'})")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    for allowed in space[key]:
        same_kind = isinstance(allowed, bool) == isinstance(value, bool)   # True must not match 1
        if (same_kind and allowed == value) or str(allowed) == text:
            return allowed
    raise KnobError(f"{key}={text} is not in SPACE (allowed: {', '.join(map(repr, space[key]))})")


class TuneProposer:
    name = "tune"
    prefetch = False    # proposals take milliseconds

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._configs: dict[str, dict[str, Any] | None] = {}   # sha -> CONFIG of that commit (a cache)

    def _config_at(self, ctx: ProposalContext, sha: str) -> dict[str, Any] | None:
        if sha not in self._configs:
            try:
                self._configs[sha] = read_knobs(ctx.read_code(sha))[0] if ctx.read_code else None
            except (KnobError, Exception):  # noqa: BLE001 - an unreadable old attempt just does not count
                self._configs[sha] = None
        return self._configs[sha]

    def propose(self, ctx: ProposalContext, cancel: threading.Event | None = None) -> Proposal:
        try:
            config, space = read_knobs(ctx.code)
        except KnobError as exc:
            return Proposal(code=None, error=str(exc), transcript=f"tune: {exc}\n")
        keys = [k for k in space if k in config]
        tried = {config_key(config, keys)}
        for a in ctx.history:
            if a.sha:
                c = self._config_at(ctx, a.sha)
                if c is not None:
                    tried.add(config_key(c, keys))
        log = [f"tune on {ctx.branch} at {ctx.parent_sha[:10]}: {len(tried)} configurations tried so far",
               f"head CONFIG: {json.dumps({k: config[k] for k in keys}, default=repr)}"]
        if ctx.notes:
            log.append("steering notes (tune acts on /set only; free text is recorded, not interpreted):")
            log += [f"  - {n}" for n in ctx.notes]
        fixed = {k: v for k, v in ctx.settings.items() if k in space}
        base = {**config, **fixed}
        rng = random.Random(f"{self.seed}:{ctx.branch}:{ctx.iteration}")
        choice, why = self._choose(base, config, space, keys, fixed, tried, rng)
        if choice is None:
            log.append(why)
            return Proposal(code=None, error=why, transcript="\n".join(log) + "\n", exhausted=not fixed)
        try:
            code = write_config(ctx.code, choice)
        except KnobError as exc:
            return Proposal(code=None, error=str(exc), transcript="\n".join(log) + "\n")
        changed = {k: choice[k] for k in keys if choice[k] != config.get(k)}
        log.append(f"{why}: {json.dumps(changed, default=repr)}")
        summary = f"tune ({why}): " + ", ".join(f"{k} {config.get(k)!r}->{v!r}" for k, v in changed.items())
        return Proposal(code=code, summary=summary, transcript="\n".join(log) + "\n")

    def _choose(self, base: dict[str, Any], config: dict[str, Any], space: dict[str, list[Any]], keys: list[str],
                fixed: dict[str, Any], tried: set[str], rng: random.Random) -> tuple[dict[str, Any] | None, str]:
        if fixed and config_key(base, keys) not in tried:
            return base, "steering /set"
        free = [k for k in keys if k not in fixed]
        if not free:
            return None, "every knob is fixed by /set and that configuration was already tried"
        moves = []
        for k in free:
            values = space[k]
            idx = values.index(base[k]) if base[k] in values else None
            steps = [values[j] for j in ((idx - 1, idx + 1) if idx is not None else range(len(values)))
                     if 0 <= j < len(values)]
            moves += [{**base, k: v} for v in steps]
        rng.shuffle(moves)
        fresh = [m for m in moves if config_key(m, keys) not in tried]
        if fresh and rng.random() >= JUMP_PROBABILITY:
            return fresh[0], "coordinate move"
        for _ in range(JUMP_TRIES):
            cand = dict(base)
            for k in rng.sample(free, rng.randint(1, min(3, len(free)))):
                cand[k] = rng.choice(space[k])
            if config_key(cand, keys) not in tried:
                return cand, "random jump"
        if fresh:
            return fresh[0], "coordinate move"
        sizes = [len(space[k]) for k in free]
        total = 1
        for s in sizes:
            total *= s
        if total <= ENUMERATE_LIMIT:
            rest = [dict(base, **dict(zip(free, combo))) for combo in itertools.product(*(space[k] for k in free))]
            rest = [c for c in rest if config_key(c, keys) not in tried]
            if rest:
                return rng.choice(rest), "random jump"
            return None, f"search space exhausted: all {total} configurations of {', '.join(free)} were tried"
        return None, f"no untried configuration found in {JUMP_TRIES} random draws"
