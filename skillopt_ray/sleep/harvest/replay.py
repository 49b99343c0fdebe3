"""A session's workspace at a given moment: the project's files at the session's recorded commit plus the edits the
session made before that moment (Claude Code's Edit / MultiEdit / Write calls that succeeded, Codex's apply_patch
calls), replayed in a fresh folder. A command check is then tried on the workspace the user accepted and on one they
corrected (verify.py). An edit that cannot be replayed exactly (a path outside the session's folder, text that is not
there, a log cut short) makes the whole replay unavailable: never a workspace that only looks like the session's.

The edits are written in place, which is safe because nothing in the workspace was planted: it is a fresh private
temporary folder (verify.py) holding only the regular files of `git archive` (recipe.materialise: no symlink, no
hard link) and the files this replay writes, and every edit's path must resolve inside it (`_target`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict

MAX_EDIT_CHARS = 400_000  # of edit text kept per session (a replay needs all of them: past it, none is kept)


class FileEdit(TypedDict):
    """One file edit: `write` (new = the whole file), `replace` (old -> new, every occurrence or exactly one),
    `delete`, or `patch` (new = a Codex apply_patch text); `path` relative to the session's folder (a patch names
    its own); `turn` the user turn it was made in."""

    op: str
    path: str
    old: str
    new: str
    every: bool
    turn: int


def relative(path: str, cwd: str) -> str:
    """The path relative to the session's folder, or "" when it lies outside it."""
    if not path:
        return ""
    if os.path.isabs(path):
        root = cwd.rstrip("/")
        if not root or not path.startswith(root + "/"):
            return ""
        path = path[len(root) + 1 :]
    parts = Path(path).parts
    return "" if not parts or ".." in parts or os.path.isabs(path) else Path(*parts).as_posix()


def _target(ws: Path, rel: str) -> Path:
    if not rel or ".." in Path(rel).parts or os.path.isabs(rel):
        raise ValueError(f"{rel!r} is not a path inside the workspace")
    out = ws / rel
    if not os.path.realpath(out).startswith(os.path.realpath(ws) + os.sep):
        raise ValueError(f"{rel!r} leads out of the workspace")
    return out


def apply(ws: Path, e: FileEdit) -> None:
    """One edit applied to the workspace; ValueError when it cannot be applied exactly."""
    if e["op"] == "patch":
        apply_patch(ws, e["new"])
        return
    path = _target(ws, e["path"])
    if e["op"] == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(e["new"], encoding="utf-8")
    elif e["op"] == "delete":
        path.unlink()
    elif e["op"] == "replace":
        text = path.read_text(encoding="utf-8") if path.is_file() else None
        if text is None or e["old"] not in text or (not e["every"] and text.count(e["old"]) != 1):
            raise ValueError(f"{e['path']}: the edit's old text is not there once")
        path.write_text(text.replace(e["old"], e["new"], -1 if e["every"] else 1), encoding="utf-8")
    else:
        raise ValueError(f"unknown edit {e['op']!r}")


def apply_patch(ws: Path, patch: str) -> None:
    """A Codex apply_patch text: `*** Add File:`, `*** Delete File:`, `*** Update File:` (with `*** Move to:` and
    `@@` hunks of ' ', '-', '+' lines), between `*** Begin Patch` and `*** End Patch`."""
    lines = patch.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("*** Add File: "):
            body, i = _block(lines, i)
            path = _target(ws, line[len("*** Add File: ") :].strip())
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(b[1:] + "\n" for b in body if b.startswith("+")), encoding="utf-8")
        elif line.startswith("*** Delete File: "):
            _target(ws, line[len("*** Delete File: ") :].strip()).unlink()
        elif line.startswith("*** Update File: "):
            path = _target(ws, line[len("*** Update File: ") :].strip())
            dest = path
            if i < len(lines) and lines[i].startswith("*** Move to: "):
                dest = _target(ws, lines[i][len("*** Move to: ") :].strip())
                i += 1
            body, i = _block(lines, i)
            text = _hunks(path.read_text(encoding="utf-8"), body)
            if dest != path:
                path.unlink()
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")


def _block(lines: list[str], i: int) -> tuple[list[str], int]:
    start = i
    while i < len(lines) and not lines[i].startswith("*** "):
        i += 1
    return lines[start:i], i


def _hunks(text: str, body: list[str]) -> str:
    """Each `@@` hunk's old lines (' ' and '-') replaced by its new lines (' ' and '+'), searched from where the last
    hunk ended."""
    lines = text.splitlines()
    at = 0
    hunks: list[list[str]] = []
    for b in body:
        if b.startswith("@@") or not hunks:
            hunks.append([])
        if not b.startswith("@@") and b != "*** End of File":
            hunks[-1].append(b)
    for h in hunks:
        old = [b[1:] for b in h if b[:1] in (" ", "-")]
        new = [b[1:] for b in h if b[:1] in (" ", "+")]
        if not old:
            lines[at:at] = new
            at += len(new)
            continue
        pos = next((k for k in range(at, len(lines) - len(old) + 1) if lines[k : k + len(old)] == old), -1)
        if pos < 0:
            raise ValueError("a hunk's old lines are not in the file")
        lines[pos : pos + len(old)] = new
        at = pos + len(new)
    return "\n".join(lines) + ("\n" if lines else "")


def replayed(ws: Path, edits: list[FileEdit], before_turn: int) -> None:
    """The edits made before the user's turn `before_turn`, in order; ValueError when one cannot be applied."""
    for e in edits:
        if e["turn"] < before_turn:
            apply(ws, e)
