"""The prompt the llm and command proposers send: everything a model needs for one attempt, in one text.

Order (DESIGN.md): task description, the branch's family and current code, the branch's last
attempts with results and errors, one line per other branch's best, the profile summary, and
the steering notes; then the reply format.
"""
from __future__ import annotations

from agent.harness.result import margin_text
from agent.proposers.base import ProposalContext
from agent.vcs import CANDIDATE_FILE

SYSTEM = ("You optimize one GPU kernel at a time. Each reply you give is applied to the file, evaluated for "
          "correctness and timed on the benchmark cases. Keep the kernel correct; make it faster.")

REPLY_FORMAT = f"""Reply with the change to {CANDIDATE_FILE} as one or more SEARCH/REPLACE blocks:

<<<<<<< SEARCH
exact lines from the current file
=======
the new lines
>>>>>>> REPLACE

Each SEARCH part must match the current file exactly, once. To rewrite the whole file instead,
give it complete in one ```python block. Start with one line that summarizes the idea.
The file must keep `custom_kernel(data)`; it must not contain the word "stream"."""

COMMAND_FORMAT = f"""Edit {CANDIDATE_FILE} in the current directory in place (it is the only file that
counts). Keep `custom_kernel(data)`; the file must not contain the word "stream". Print a one-line
summary of your change as the last line of your output."""


def _us(v: float | None) -> str:
    return f"{v:.2f} µs" if v else "no measurement"


def build_prompt(ctx: ProposalContext, history: int = 6, for_command: bool = False) -> str:
    parts = [f"# Task: {ctx.task_name}", ctx.task_description.strip() or "(no description)", ""]
    speed = ""
    if ctx.head_us and ctx.baseline_us:
        speed = f", {ctx.baseline_us / ctx.head_us:.3f}x the baseline's {ctx.baseline_us:.2f} µs"
    parts += [f"# Branch {ctx.branch} (algorithm family: {ctx.family})",
              f"Current kernel: geomean {_us(ctx.head_us)}{speed}. Its {CANDIDATE_FILE}:",
              "```python", ctx.code.rstrip(), "```", ""]
    recent = ctx.history[-history:] if history > 0 else []
    if recent:
        parts.append(f"# Last {len(recent)} attempts on this branch (oldest first)")
        if any(a.margin is not None for a in recent):
            parts.append("(accuracy: the most of the checker's tolerance any checked output used; over 100% fails, "
                         "and a kernel near the limit may fail on other inputs)")
        for a in recent:
            result = _us(a.geomean_us) if a.geomean_us else ""
            accuracy = f" (accuracy {margin_text(a.margin)})" if a.margin is not None else ""
            why = f": {a.message}" if a.message and a.verdict != "accepted" else ""
            parts.append(f"- #{a.iteration} {a.verdict} {result}{accuracy} {a.summary or '(no summary)'}{why}"
                         .replace("  ", " "))
        parts.append("")
    if ctx.others:
        parts.append("# Best of the other branches")
        parts += [f"- {line}" for line in ctx.others]
        parts.append("")
    if ctx.profile:
        parts += ["# Profile of the current kernel", ctx.profile.strip(), ""]
    if ctx.settings:
        parts.append("# Settings requested by the person")
        parts += [f"- set CONFIG[{k!r}] = {v!r}" for k, v in ctx.settings.items()]
        parts.append("")
    if ctx.notes:
        parts.append("# Steering from the person (follow it)")
        parts += [f"- {n}" for n in ctx.notes]
        parts.append("")
    parts.append(COMMAND_FORMAT if for_command else REPLY_FORMAT)
    return "\n".join(parts) + "\n"


def first_line_summary(reply: str, limit: int = 120) -> str:
    """The reply's first line of prose, as the attempt's one-line summary."""
    for line in reply.splitlines():
        text = line.strip().strip("#*`>-= ").strip()
        if text and not text.startswith(("<<<<<<<", ">>>>>>>", "```", "SEARCH", "REPLACE")):
            return text[:limit]
    return ""
