"""Proposers: where the next candidate comes from (tune, llm, command), behind one interface."""
from __future__ import annotations

from agent.config import RunConfig
from agent.proposers.base import AttemptInfo, Proposal, ProposalContext, Proposer

__all__ = ["AttemptInfo", "Proposal", "ProposalContext", "Proposer", "make_proposer"]


def make_proposer(cfg: RunConfig) -> Proposer:
    if cfg.proposer == "llm":
        from agent.proposers.llm import LlmProposer
        return LlmProposer(cfg)
    if cfg.proposer == "command":
        from agent.proposers.command import CommandProposer
        return CommandProposer(cfg)
    from agent.proposers.tune import TuneProposer
    return TuneProposer(cfg.seed)
