"""The learned rules proposed as one marked block in the project's memory file (AGENTS.md for Codex, CLAUDE.md for
Claude Code): only the text between the block's two marker lines is ever written, every other byte of the file stays
as the user left it, so a night can never rewrite instructions a person wrote."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

FILES = {"codex": "AGENTS.md", "claude_code": "CLAUDE.md"}
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


class MemoryRefused(ValueError):
    """The memory file's markers cannot be edited safely (inside a code fence, doubled, or unpaired)."""


def begin_marker(name: str) -> str:
    return f"<!-- skillopt-ray:begin {name} -->"


def end_marker(name: str) -> str:
    return f"<!-- skillopt-ray:end {name} -->"


def memory_path(project: Path, target: str) -> Path:
    """The memory file the target's CLI reads at the project's top; a chat target has none, so it is refused."""
    if target not in FILES:
        raise ValueError(f"--memory needs --target codex or claude_code (a {target} target reads no memory file)")
    return project / FILES[target]


@dataclass(frozen=True)
class Block:
    """Where the marked block's inner text sits in the file: [start, end) character offsets."""

    start: int
    end: int


def _lines(text: str) -> list[tuple[int, str]]:
    """Each line with its offset, line endings kept out of the text compared (CRLF files work too)."""
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        out.append((pos, line))
        pos += len(line)
    return out


def find_block(text: str, name: str) -> Optional[Block]:
    """The block of skill `name`, None when the file has none; a refusal when its markers are not one clean pair
    outside code fences (editing then could touch text a person wrote)."""
    begin, end = begin_marker(name), end_marker(name)
    fence: Optional[str] = None
    begins: list[int] = []  # offset just after the begin line
    ends: list[int] = []  # offset of the end line
    for pos, raw in _lines(text):
        line = raw.rstrip("\r\n")
        m = _FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark) :].strip():
                fence = None
            continue
        stripped = line.strip()
        if stripped not in (begin, end):
            continue
        if fence is not None:
            raise MemoryRefused(
                f"the memory file has the {name!r} block marker {stripped!r} inside a code fence; move it out of "
                "the fence or delete it, then stage again"
            )
        (begins if stripped == begin else ends).append(pos + (len(raw) if stripped == begin else 0))
    if not begins and not ends:
        return None
    if len(begins) != 1 or len(ends) != 1:
        raise MemoryRefused(
            f"the memory file has {len(begins)} begin and {len(ends)} end markers of block {name!r}; keep exactly "
            "one pair (or none), then stage again"
        )
    if ends[0] < begins[0]:
        raise MemoryRefused(f"the memory file's end marker of block {name!r} comes before its begin marker; fix it")
    return Block(begins[0], ends[0])


def block_text(text: str, name: str) -> Optional[str]:
    """The block's current inner text (what `status` shows), None when there is none."""
    b = find_block(text, name)
    return None if b is None else text[b.start : b.end]


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def propose(live: str, name: str, rules: str) -> str:
    """The memory file's whole text with the block holding `rules`: the old block's inside replaced, or a new block
    appended after the unchanged text (a blank line between)."""
    nl = _newline(live)
    inner = "".join(ln.rstrip("\r\n") + nl for ln in rules.strip().splitlines())
    b = find_block(live, name)
    if b is not None:
        return live[: b.start] + inner + live[b.end :]
    sep = "" if not live else (nl if live.endswith(("\n", "\r")) else nl + nl)
    return live + sep + begin_marker(name) + nl + inner + end_marker(name) + nl


def read_live(path: Path) -> str:
    """The live file's text exactly (no newline translation); "" when it does not exist yet."""
    if not path.exists():
        return ""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise MemoryRefused(f"{path} is not UTF-8 text ({e}); save it as UTF-8 or run without --memory") from e


def proposal(project: Path, target: str, name: str, rules: str) -> tuple[str, Path]:
    """(the proposed whole text, the live path), as staging takes it."""
    path = memory_path(project, target)
    return propose(read_live(path), name, rules), path
