"""RunConfig: every option of a run, its defaults, and its session.toml form.

An option counts as given only when the command line (or caller) set it explicitly, so that a
resume keeps the stored configuration and overrides only what was asked for.
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

PROPOSERS = ("tune", "llm", "command")
DEVICES = ("auto", "cpu", "cuda")
DEFAULT_BEAM = 4

# Fields that live in the [prices] table of session.toml.
PRICE_FIELDS = {"price_in_per_mtok": "input_per_mtok", "price_out_per_mtok": "output_per_mtok"}
# Fields never written to session.toml: they describe this process, not the session.
RUNTIME_FIELDS = ("lock_wait_s", "explicit")


class ConfigError(ValueError):
    """An option value that cannot be used; the message names it."""


@dataclass
class RunConfig:
    task: str = "qr"
    proposer: str = "tune"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"      # the variable's name is stored, never its value
    command: str | None = None               # the external agent for --proposer command
    command_timeout_s: float = 1800.0
    device: str = "auto"
    gpus: list[int] = field(default_factory=list)    # empty: the first GPU (or the CPU without one)
    beam: int = DEFAULT_BEAM
    families: list[str] = field(default_factory=list)  # seed families to start from; empty: the task's seeds
    max_iterations: int | None = None
    max_hours: float | None = None
    max_cost: float | None = None
    plateau_attempts: int = 8
    plateau_minutes: float = 60.0
    on_event: str | None = None
    on_event_timeout_s: float = 10.0
    seed: int = 0
    eval_mode: str = "quick"
    noise_floor: float | None = None          # smallest relative gain accepted; None: measured at setup
    max_margin: float | None = None           # most of the checker's tolerance a win may use; None: no limit
    stage_timeout: float | None = None
    history: int = 6                          # attempts of the branch shown to llm/command
    llm_timeout_s: float = 300.0
    llm_retries: int = 5
    llm_backoff_s: float = 2.0                # first retry wait; doubles each time
    llm_max_tokens: int | None = None
    llm_temperature: float | None = None
    error_backoff_s: float = 60.0             # loop pause after the proposer gave up; doubles, capped
    proposal_fail_limit: int = 3              # consecutive failed proposals before a branch is paused
    price_in_per_mtok: float = 0.0            # USD per million prompt tokens
    price_out_per_mtok: float = 0.0
    lock_wait_s: float = 0.0
    explicit: frozenset[str] = frozenset()

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> "RunConfig":
        if self.proposer not in PROPOSERS:
            raise ConfigError(f"--proposer must be one of {', '.join(PROPOSERS)}, not {self.proposer!r}")
        if self.device not in DEVICES:
            raise ConfigError(f"--device must be one of {', '.join(DEVICES)}, not {self.device!r}")
        if self.beam < 1:
            raise ConfigError("--beam must be at least 1")
        if self.proposer == "llm" and not self.model:
            raise ConfigError("--proposer llm needs --model (the model name the endpoint serves)")
        if self.proposer == "command" and not (self.command or "").strip():
            raise ConfigError("--proposer command needs --command (e.g. \"codex exec --full-auto\")")
        for name in ("max_iterations", "max_hours", "max_cost"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must not be negative")
        if self.plateau_attempts < 1 or self.plateau_minutes <= 0:
            raise ConfigError("plateau limits must be positive")
        if self.noise_floor is not None and not 0 <= self.noise_floor < 1:
            raise ConfigError(f"--noise-floor is a fraction of the head's time from 0 to 1 (0.01 is 1%), "
                              f"not {self.noise_floor!r}")
        if self.max_margin is not None and not 0 < self.max_margin <= 1:
            raise ConfigError(f"--max-margin is a fraction of the checker's tolerance above 0 and up to 1 "
                              f"(0.5 is half), not {self.max_margin!r}")
        if any(g < 0 for g in self.gpus):
            raise ConfigError("--gpus takes GPU indices (0, 1, ...)")
        if len(set(self.families)) != len(self.families):
            raise ConfigError(f"--families names a family twice: {','.join(self.families)}")
        return self

    # -- session.toml ----------------------------------------------------------------------
    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        prices: dict[str, Any] = {}
        for f in fields(self):
            if f.name in RUNTIME_FIELDS:
                continue
            value = getattr(self, f.name)
            if f.name in PRICE_FIELDS:
                prices[PRICE_FIELDS[f.name]] = value
            elif value is not None:
                out[f.name] = list(value) if isinstance(value, list) else value
        out["prices"] = prices
        return out

    @classmethod
    def from_toml(cls, doc: dict[str, Any]) -> "RunConfig":
        known = {f.name: f for f in fields(cls) if f.name not in RUNTIME_FIELDS}
        kw: dict[str, Any] = {k: v for k, v in doc.items() if k in known and k not in PRICE_FIELDS}
        prices = doc.get("prices") or {}
        for name, key in PRICE_FIELDS.items():
            if isinstance(prices, dict) and key in prices:
                kw[name] = float(prices[key])
        if "gpus" in kw:
            kw["gpus"] = [int(g) for g in kw["gpus"]]
        if "families" in kw:
            kw["families"] = [str(f) for f in kw["families"]]
        return cls(**kw)

    def overridden_by(self, other: "RunConfig") -> "RunConfig":
        """This (stored) config with the options `other` was explicitly given."""
        changes = {name: getattr(other, name) for name in other.explicit}
        changes["lock_wait_s"] = other.lock_wait_s
        return dataclasses.replace(self, **changes, explicit=other.explicit)

    def explicit_values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in sorted(self.explicit) if name not in RUNTIME_FIELDS}

    # -- argparse --------------------------------------------------------------------------
    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> "RunConfig":
        """Options the namespace holds with a value other than None count as given explicitly."""
        kw: dict[str, Any] = {}
        names = {f.name for f in fields(cls)} - set(RUNTIME_FIELDS)
        for name in names:
            value = getattr(ns, name, None)
            if value is not None:
                kw[name] = value
        if isinstance(kw.get("gpus"), str):
            kw["gpus"] = parse_gpus(kw["gpus"])
        if isinstance(kw.get("families"), str):
            kw["families"] = parse_families(kw["families"])
        cfg = cls(**kw, explicit=frozenset(kw))
        cfg.lock_wait_s = float(getattr(ns, "lock_wait", None) or 0.0)
        return cfg


def parse_gpus(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise ConfigError(f"--gpus takes comma-separated GPU indices like 0,1, not {text!r}") from None


def parse_families(text: str) -> list[str]:
    names = [x for x in text.replace(" ", "").split(",") if x != ""]
    if not names:
        raise ConfigError(f"--families takes comma-separated seed names like wy_blocked,superpanel, not {text!r}")
    return [x[:-3] if x.endswith(".py") else x for x in names]


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The `steer run` options. Every default is None so that a resume can tell what was given."""
    p.add_argument("--task", default=None, help="task directory or bundled task name (default: qr)")
    p.add_argument("--proposer", choices=PROPOSERS, default=None, help="tune (default), llm or command")
    p.add_argument("--model", default=None, help="model name for --proposer llm")
    p.add_argument("--base-url", dest="base_url", default=None, help="OpenAI-compatible endpoint URL")
    p.add_argument("--api-key-env", dest="api_key_env", default=None, metavar="NAME",
                   help="environment variable holding the API key (default: OPENAI_API_KEY)")
    p.add_argument("--command", default=None, help="external agent command for --proposer command")
    p.add_argument("--command-timeout", dest="command_timeout_s", type=float, default=None, metavar="SECONDS")
    p.add_argument("--device", choices=DEVICES, default=None, help="auto (default): the GPU if present")
    p.add_argument("--gpus", default=None, help="GPU indices to evaluate on concurrently, e.g. 0,1")
    p.add_argument("--beam", type=int, default=None,
                   help=f"branches at start (default {DEFAULT_BEAM}; --families starts every family it names)")
    p.add_argument("--families", default=None, metavar="NAMES",
                   help="seed families to start the beam from, e.g. wy_blocked,superpanel (the seed files' "
                        "names; default: the task's seeds in name order, up to --beam). A resume with new "
                        "families adds their branches")
    p.add_argument("--max-iterations", dest="max_iterations", type=int, default=None)
    p.add_argument("--max-hours", dest="max_hours", type=float, default=None)
    p.add_argument("--max-cost", dest="max_cost", type=float, default=None, metavar="USD")
    p.add_argument("--plateau-attempts", dest="plateau_attempts", type=int, default=None, metavar="K")
    p.add_argument("--plateau-minutes", dest="plateau_minutes", type=float, default=None, metavar="T")
    p.add_argument("--on-event", dest="on_event", default=None, metavar="CMD",
                   help="shell command run with the event JSON on stdin (plateau, budget, error, stop)")
    p.add_argument("--seed", type=int, default=None, help="seed of the tune proposer and the scheduler")
    p.add_argument("--eval-mode", dest="eval_mode", choices=("quick", "full", "leaderboard", "profile"),
                   default=None)
    p.add_argument("--noise-floor", dest="noise_floor", type=float, default=None, metavar="FRACTION",
                   help="smallest relative gain accepted, e.g. 0.01, for every branch; default: measured "
                        "at setup for each family by timing its seed twice more")
    p.add_argument("--max-margin", dest="max_margin", type=float, default=None, metavar="FRACTION",
                   help="reject a faster candidate whose outputs used more than this fraction of the checker's "
                        "tolerance, e.g. 0.5 (tasks whose reference.py has check_margin; default: no limit)")
    p.add_argument("--stage-timeout", dest="stage_timeout", type=float, default=None, metavar="SECONDS")
    p.add_argument("--price-in", dest="price_in_per_mtok", type=float, default=None, metavar="USD_PER_MTOK")
    p.add_argument("--price-out", dest="price_out_per_mtok", type=float, default=None, metavar="USD_PER_MTOK")
    p.add_argument("--llm-timeout", dest="llm_timeout_s", type=float, default=None, metavar="SECONDS")
    p.add_argument("--llm-retries", dest="llm_retries", type=int, default=None)
    p.add_argument("--root", default=None, help="sessions directory (default: $STEER_HOME or ./sessions)")
