"""Steer's agent: the loop, proposers, evaluation harness and git record. Never imports the UI."""

__version__ = "0.1.0"
