"""Evaluation harness: load a GPU MODE task, run a candidate in a sandboxed worker, time it."""
