"""Turn a model's reply into a new candidate: SEARCH/REPLACE blocks, or a whole file in a ```python fence.

Every way a reply can be unusable comes back as a one-line reason, never an exception.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from agent.vcs import CANDIDATE_FILE

SEARCH_RE = re.compile(r"^<{5,9} ?SEARCH\s*$")
DIVIDER_RE = re.compile(r"^={5,9}\s*$")
REPLACE_RE = re.compile(r"^>{5,9} ?REPLACE\s*$")
FENCE_RE = re.compile(r"^```([\w+-]*)\s*$")
# A line that is only a file name (aider's and markdown's way of saying which file a block edits)
FILE_LINE_RE = re.compile(r"[\w./-]+\.(?:py|pyi|cu|cuh|cpp|cc|cxx|c|h|hpp|txt|sh|ya?ml|json|toml|cfg|ini|md)")
MAX_CODE_BYTES = 1 << 20     # a kernel file larger than this is a runaway reply, not a kernel


@dataclass
class Edit:
    search: str
    replace: str


@dataclass
class Parsed:
    code: str | None
    error: str | None = None
    how: str = ""          # "edits" | "file"


def parse_blocks(reply: str) -> tuple[list[Edit], str | None]:
    """SEARCH/REPLACE blocks in order; an error for a block that never closes."""
    edits: list[Edit] = []
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        if not SEARCH_RE.match(lines[i]):
            i += 1
            continue
        start = i
        i += 1
        search: list[str] = []
        while i < len(lines) and not DIVIDER_RE.match(lines[i]):
            search.append(lines[i])
            i += 1
        if i >= len(lines):
            return edits, f"SEARCH block {len(edits) + 1} (line {start + 1}) has no ======= divider"
        i += 1
        replace: list[str] = []
        while i < len(lines) and not REPLACE_RE.match(lines[i]):
            replace.append(lines[i])
            i += 1
        if i >= len(lines):
            return edits, f"SEARCH block {len(edits) + 1} (line {start + 1}) has no >>>>>>> REPLACE end"
        i += 1
        edits.append(Edit("\n".join(search), "\n".join(replace)))
    return edits, None


def fenced_blocks(reply: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    out: list[tuple[str, str]] = []
    lang: str | None = None
    body: list[str] = []
    for line in reply.splitlines():
        m = FENCE_RE.match(line.strip()) if line.strip().startswith("```") else None
        if lang is None:
            if m is not None:
                lang, body = m.group(1).lower(), []
        elif line.strip() == "```":
            out.append((lang, "\n".join(body) + "\n"))
            lang = None
        else:
            body.append(line)
    return out


def apply_edits(code: str, edits: list[Edit]) -> tuple[str | None, str | None]:
    for n, e in enumerate(edits, 1):
        if not e.search.strip():
            return None, f"SEARCH block {n} is empty (say what to replace)"
        count = code.count(e.search)
        if count == 1:
            code = code.replace(e.search, e.replace, 1)
            continue
        if count > 1:
            return None, f"SEARCH block {n} matches {count} places; it must match exactly one"
        # Tolerate trailing-whitespace differences, matching whole lines.
        have = code.split("\n")
        want = [ln.rstrip() for ln in e.search.split("\n")]
        hits = [i for i in range(len(have) - len(want) + 1)
                if [ln.rstrip() for ln in have[i:i + len(want)]] == want]
        if len(hits) != 1:
            first = next((ln.strip() for ln in want if ln.strip()), "")
            what = "does not match the current code" if not hits else f"matches {len(hits)} places"
            return None, f"SEARCH block {n} {what} (it starts {first[:60]!r})"
        i = hits[0]
        code = "\n".join(have[:i] + e.replace.split("\n") + have[i + len(want):])
    return code, None


def _named_file(lines: list[str], index: int) -> str | None:
    """The file named on its own line just above line `index` (blank lines and one fence opener skipped)."""
    j, fences = index - 1, 0
    while j >= 0 and (not lines[j].strip() or (fences == 0 and FENCE_RE.match(lines[j].strip()))):
        fences += 1 if lines[j].strip() else 0
        j -= 1
    if j < 0:
        return None
    bare = lines[j].strip().strip("`*#>: ").strip()
    bare = re.sub(r"^(?:file|path|filename)\s*:\s*", "", bare, flags=re.IGNORECASE).strip("`*: ")
    return bare if FILE_LINE_RE.fullmatch(bare) else None


def other_file(reply: str) -> str | None:
    """A file other than submission.py that one of the reply's blocks says it edits."""
    lines = reply.splitlines()
    for i, line in enumerate(lines):
        if SEARCH_RE.match(line) or FENCE_RE.match(line.strip()):
            name = _named_file(lines, i)
            if name and os.path.basename(name) != CANDIDATE_FILE:
                return name
    return None


def parse_reply(reply: str, current: str) -> Parsed:
    parsed = _parse_reply(reply, current)
    if parsed.code is not None and len(parsed.code.encode()) > MAX_CODE_BYTES:
        size = len(parsed.code.encode()) / (1 << 20)
        return Parsed(None, f"the resulting {CANDIDATE_FILE} is {size:.1f} MB; the limit is "
                            f"{MAX_CODE_BYTES >> 20} MB", parsed.how)
    return parsed


def _parse_reply(reply: str, current: str) -> Parsed:
    if not reply or not reply.strip():
        return Parsed(None, "the reply is empty")
    target = other_file(reply)
    if target:
        return Parsed(None, f"the reply edits {target}; only {CANDIDATE_FILE} can be changed")
    edits, err = parse_blocks(reply)
    if err:
        return Parsed(None, err)
    if edits:
        code, err = apply_edits(current, edits)
        return Parsed(code, err, "edits")
    fences = [(lang, body) for lang, body in fenced_blocks(reply) if lang in ("python", "py", "")]
    if not fences:
        return Parsed(None, "the reply has no SEARCH/REPLACE block and no ```python code block")
    with_kernel = [body for _, body in fences if "def custom_kernel" in body]
    body = with_kernel[-1] if with_kernel else max((b for _, b in fences), key=len)
    if "custom_kernel" not in body:
        return Parsed(None, "the reply's code block does not define custom_kernel (a whole file was expected)")
    return Parsed(body, None, "file")


def check_python(code: str) -> str | None:
    """None when `code` compiles, else the reason."""
    try:
        compile(code, "submission.py", "exec")
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    except ValueError as exc:
        return f"not Python source: {exc}"
    return None
