"""Claude Code sessions: `$CLAUDE_CONFIG_DIR/projects/*/*.jsonl` (sub-agent files skipped), read by record type."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional, Union

from skillopt_envs.jsontypes import JSONObject, JSONValue, as_object

from skillopt_ray.harness import trace
from skillopt_ray.sleep.harvest.digest import MAX_COMMANDS, DigestBuilder, SessionDigest
from skillopt_ray.sleep.harvest.replay import FileEdit, relative
from skillopt_ray.sleep.harvest.sources.lines import ODD, records

SOURCE = "claude_code"
_KNOWN = {
    "summary",
    "system",
    "file-history-snapshot",
    "queue-operation",
    "attachment",
    "progress",
    "custom-title",
    "last-prompt",
}
_EDITS = {"Edit", "Write", "MultiEdit", "NotebookEdit"}
# user-role text the user did not type: slash-command wrappers, hook output, the CLI's caveats
_COMMAND_NAME = re.compile(r"<command-name>\s*(/?[^<\s]+)\s*</command-name>")
# a Bash call's command or an edit call's edits, until the call's result says how it ended
Pending = Union[str, list[FileEdit]]
_NOT_TYPED = ("<command-", "<local-command", "<system-reminder", "Caveat:", "<bash-", "<user-prompt-submit-hook")


def home(override: Optional[str] = None) -> Path:
    """`--claude-home`, else $CLAUDE_CONFIG_DIR, else ~/.claude."""
    return Path(override or os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser()


def session_files(root: Path) -> Iterator[Path]:
    """One file per session; sub-agents' own files (agent-*.jsonl, subagents/) are not sessions the user ran."""
    for f in sorted((root / "projects").glob("*/*.jsonl")):
        if not f.name.startswith("agent-"):
            yield f


def parse(path: Path, redact: Callable[[str], str], in_scope: Callable[[str], bool]) -> Optional[SessionDigest]:
    """The session's digest, or None when its recorded folder is out of scope (it stops reading there)."""
    b = DigestBuilder(SessionDigest(SOURCE, path.stem, str(path)), redact)
    calls: list[JSONObject] = []
    pending: dict[
        str, Pending
    ] = {}  # a Bash or edit call's id -> its command or edits, until its result says how it ended
    skipped: Counter = Counter()
    for rec in records(path, skipped):
        try:
            if not _record(b, rec, in_scope, calls, pending):
                return None
        except ODD:
            skipped["odd_record"] += 1
    if not b.digest.cwd:
        return None
    t = trace.claude_session_trace(calls)
    for cmd in t.commands:
        b.tool("", command=cmd)
    for f in t.files_read:
        b.tool("", file=f)
    return b.finish(skipped)


def _record(
    b: DigestBuilder,
    rec: JSONObject,
    in_scope: Callable[[str], bool],
    calls: list[JSONObject],
    pending: dict[str, Pending],
) -> bool:
    """One record into the digest; False when the session's recorded folder is out of scope."""
    kind = rec.get("type")
    if kind not in ("user", "assistant"):
        if kind not in _KNOWN:
            b.unknown(str(kind))
        return True
    if rec.get("isSidechain"):
        return True  # a sub-agent's turn inside the session
    if not b.digest.cwd and rec.get("cwd"):
        if not in_scope(str(rec["cwd"])):
            return False
        b.digest.cwd = str(rec["cwd"])
        b.digest.session_id = str(rec.get("sessionId") or b.digest.session_id)
        b.digest.git_branch = str(rec.get("gitBranch") or "")[:200]
    b.time(rec.get("timestamp"))
    msg = as_object(rec.get("message"))
    if kind == "user" and not rec.get("isMeta"):
        _user(b, msg.get("content"), pending)
    elif kind == "assistant":
        _assistant(b, msg.get("content"), calls, pending)
    return True


def _is_text(block: JSONObject) -> bool:
    return isinstance(block.get("text"), str)


def _user(b: DigestBuilder, content: JSONValue, pending: dict[str, Pending]) -> None:
    """What the user typed: a string, or text blocks (tool results are the tools' output, not the user's: a Bash
    call's result says only whether its command failed, an edit's whether it was made)."""
    if isinstance(content, str):
        texts = [content]
    else:
        blocks = [c for c in content if isinstance(c, dict)] if isinstance(content, list) else []
        for c in blocks:
            if c.get("type") == "tool_result" and str(c.get("tool_use_id")) in pending:
                _result(b, pending.pop(str(c.get("tool_use_id"))), c.get("is_error") is not True)
        texts = [str(c["text"]) for c in blocks if c.get("type") == "text" and _is_text(c)]
    for text in texts:
        m = _COMMAND_NAME.search(text)
        if m:
            b.slash(m.group(1))
        if text.strip() and not text.lstrip().startswith(_NOT_TYPED):
            b.user(text)


def _result(b: DigestBuilder, call: Pending, ok: bool) -> None:
    if isinstance(call, str):
        b.ran(call, ok)
    elif ok:
        for e in call:
            b.edit(e)


def _edits(name: str, inp: JSONObject, cwd: str) -> list[FileEdit]:
    """An Edit / MultiEdit / Write call's edits, its path relative to the session's folder ("" outside it)."""
    path = relative(str(inp.get("file_path") or ""), cwd)
    if name == "Write":
        return [
            {"op": "write", "path": path, "old": "", "new": str(inp.get("content") or ""), "every": False, "turn": 0}
        ]
    parts = inp.get("edits") if name == "MultiEdit" else [inp]
    return [
        {"op": "replace", "path": path, "old": str(p.get("old_string") or ""), "new": str(p.get("new_string") or ""),
         "every": p.get("replace_all") is True, "turn": 0}
        for p in parts if isinstance(p, dict)
    ] if isinstance(parts, list) else []  # fmt: skip


def _assistant(b: DigestBuilder, content: JSONValue, calls: list[JSONObject], pending: dict[str, Pending]) -> None:
    blocks = [c for c in content or [] if isinstance(c, dict)] if isinstance(content, list) else []
    for c in blocks:
        if c.get("type") == "text" and _is_text(c):
            b.reply(str(c["text"]))
        elif c.get("type") == "tool_use":
            name = str(c.get("name") or "tool")
            inp = as_object(c.get("input"))
            b.tool(name, file=str(inp.get("file_path") or "") if name in _EDITS else "")
            skill, command = inp.get("skill"), inp.get("command")
            if name == "Skill" and isinstance(skill, str):
                b.skill(skill)
            if name == "Bash" and isinstance(command, str) and len(pending) < 4 * MAX_COMMANDS:
                pending[str(c.get("id"))] = command
            elif name in ("Edit", "MultiEdit", "Write") and len(pending) < 4 * MAX_COMMANDS:
                pending[str(c.get("id"))] = _edits(name, inp, b.digest.cwd)
            if name in ("Bash", "Read") and inp and len(calls) < 4 * MAX_COMMANDS:
                calls.append({"type": "assistant", "message": {"content": [c]}})
