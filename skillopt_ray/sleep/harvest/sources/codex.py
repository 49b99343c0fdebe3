"""Codex CLI sessions: `$CODEX_HOME/sessions/**/rollout-*.jsonl` and `archived_sessions/*.jsonl`, read by event kind.

The reference reads only the archive folder (Codex Desktop's), not the CLI's own dated rollout tree."""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from skillopt_envs.jsontypes import JSONObject, as_object

from skillopt_ray.harness import trace
from skillopt_ray.sleep.harvest.digest import MAX_COMMANDS, MAX_REPLIES, DigestBuilder, SessionDigest
from skillopt_ray.sleep.harvest.replay import MAX_EDIT_CHARS
from skillopt_ray.sleep.harvest.sources.lines import ODD, records

SOURCE = "codex"
_TOP = {"session_meta", "response_item", "event_msg", "turn_context", "compacted", "world_state", "token_usage_record"}
_TOOL_CALLS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
_QUIET_ITEMS = {"function_call_output", "custom_tool_call_output", "reasoning", "message"}
_QUIET_EVENTS = {
    "token_count", "agent_reasoning", "agent_reasoning_section_break", "task_started", "task_complete",
    "exec_command_begin", "exec_command_end", "patch_apply_begin", "patch_apply_end", "item_completed",
    "item_started", "turn_aborted", "error", "mcp_tool_call_begin", "mcp_tool_call_end", "web_search_begin",
    "web_search_end", "turn_diff", "stream_error", "background_event", "plan_update", "entered_review_mode",
    "exited_review_mode", "user_message", "agent_message", "context_compacted", "thread_settings_applied",
}  # fmt: skip
# kinds never read, passed over unparsed (tool output is most of a log's bytes)
_UNREAD = (b'"function_call_output"', b'"custom_tool_call_output"', b'"token_count"', b'"token_usage_record"')
MAX_TIMELINE = 5000  # turns, replies, command results and patches held until the end (texts cut as the digest's)


def home(override: Optional[str] = None) -> Path:
    """`--codex-home`, else $CODEX_HOME, else ~/.codex."""
    return Path(override or os.environ.get("CODEX_HOME") or Path.home() / ".codex").expanduser()


def session_files(root: Path) -> Iterator[Path]:
    """The CLI's dated rollouts, then the archived ones."""
    yield from sorted((root / "sessions").glob("**/rollout-*.jsonl"))
    yield from sorted((root / "archived_sessions").glob("*.jsonl"))


def parse(path: Path, redact: Callable[[str], str], in_scope: Callable[[str], bool]) -> Optional[SessionDigest]:
    """The session's digest, or None when its recorded folder is out of scope (it stops reading there)."""
    b = DigestBuilder(SessionDigest(SOURCE, _id_from_name(path), str(path)), redact)
    calls: list[JSONObject] = []
    timeline = Timeline(b)
    skipped: Counter = Counter()
    for rec in records(path, skipped, _UNREAD):
        try:
            if not _record(b, rec, in_scope, calls, timeline):
                return None
        except ODD:
            skipped["odd_record"] += 1
    if not b.digest.cwd:
        return None  # no recorded folder: never in any project's scope
    timeline.replay(b)
    _commands(b, calls)
    return b.finish(skipped)


@dataclass
class Timeline:
    """What the user typed, the agent's replies and the commands' exit statuses, in the log's order, replayed once
    the whole log is read: Codex 0.171 logs what the user typed only as a model-facing message, older versions as
    events too (the events win when there are any; the messages are then the same turns again)."""

    b: DigestBuilder  # holds each text redacted whole, then cut (a cut first leaves part of a secret)
    entries: list[tuple[str, str, bool, Counter]] = field(default_factory=list)  # (kind, text, ok, its redactions)
    kinds: set[str] = field(default_factory=set)
    tail: deque = field(default_factory=lambda: deque(maxlen=MAX_REPLIES))  # replies past a full timeline
    patch_chars: int = 0
    tail_patch: bool = False

    def add(self, kind: str, text: str, ok: bool = True) -> None:
        self.kinds.add(kind)
        counted: Counter = Counter()
        if kind == "patch":
            self.patch_chars += len(text)
            text = text if self.patch_chars <= MAX_EDIT_CHARS else ""  # past the replay's budget: not replayable
        elif len(self.entries) < MAX_TIMELINE or kind.startswith("reply"):
            text, counted = self.b.held(text, tail=kind.startswith("reply"))
        if len(self.entries) < MAX_TIMELINE:
            self.entries.append((kind, text, ok, counted))
        elif kind.startswith("reply"):
            self.tail.append((kind, text, ok, counted))  # a very long session: its last replies are still the outcome
        elif kind == "patch":
            self.tail_patch = True  # an edit that cannot be kept: this session's workspace cannot be replayed

    def replay(self, b: DigestBuilder) -> None:
        """Each held text into the digest (its redactions counted only now, for the copy that is used)."""
        users = "user_event" if "user_event" in self.kinds else "user_item"
        replies = "reply_event" if "reply_event" in self.kinds else "reply_item"
        lost: list[tuple[str, str, bool, Counter]] = [("patch", "", False, Counter())] if self.tail_patch else []
        for kind, text, ok, counted in [*self.entries, *self.tail, *lost]:
            if kind == users:
                b.user(text, redacted=True, counted=counted)
            elif kind == replies:
                b.reply(text, redacted=True, counted=counted)
            elif kind == "run":
                b.ran(text, ok, redacted=True, counted=counted)
            elif kind == "patch":
                b.edit({"op": "patch", "path": "", "old": "", "new": text, "every": False, "turn": 0})


def _record(
    b: DigestBuilder, rec: JSONObject, in_scope: Callable[[str], bool], calls: list[JSONObject], t: Timeline
) -> bool:
    """One record into the digest; False when the session's recorded folder is out of scope."""
    kind, p = rec.get("type"), as_object(rec.get("payload"))
    b.time(rec.get("timestamp"))
    if kind == "session_meta":
        return _meta(b, p, in_scope)
    if kind == "turn_context" and not b.digest.cwd and p.get("cwd"):
        if not in_scope(str(p["cwd"])):
            return False
        b.digest.cwd = str(p["cwd"])
    elif kind == "event_msg":
        _event(b, p, t)
    elif kind == "response_item":
        _item(b, p, calls, t)
    elif kind not in _TOP:
        b.unknown(str(kind))
    return True


def _text(value: object) -> str:
    """A text field's text; anything else (a number, an object) holds none."""
    return value if isinstance(value, str) else ""


def _id_from_name(path: Path) -> str:
    """rollout-<date>-<uuid>.jsonl: the uuid's five groups (the id until session_meta gives it)."""
    parts = path.stem.split("-")
    return "-".join(parts[-5:]) if len(parts) >= 6 else path.stem


def _meta(b: DigestBuilder, p: JSONObject, in_scope: Callable[[str], bool]) -> bool:
    d = b.digest
    if p.get("id"):
        d.session_id = str(p["id"])
    b.instant(p.get("timestamp"))
    cwd = str(p.get("cwd") or "")
    if cwd:
        if not in_scope(cwd):
            return False
        d.cwd = cwd
    git = as_object(p.get("git"))
    d.git_commit = str(git.get("commit_hash") or "")[:64]
    d.git_branch = str(git.get("branch") or "")[:200]
    return True


def _event(b: DigestBuilder, p: JSONObject, timeline: Timeline) -> None:
    sub = p.get("type")
    if sub == "user_message":
        timeline.add("user_event", _text(p.get("message")))
    elif sub == "agent_message":
        timeline.add("reply_event", _text(p.get("message")))
    elif sub == "item_completed" and as_object(p.get("item")).get("type") == "CommandExecution":
        _ran(timeline, as_object(p.get("item")))
    elif sub == "exec_command_end":  # the CLI's older form of a finished command
        _ran(timeline, p)
    elif sub not in _QUIET_EVENTS:
        b.unknown(f"event_msg:{sub}")


def _ran(timeline: Timeline, item: JSONObject) -> None:
    """A finished command and its exit status (a shell's `-lc` wrapper taken off, as the model wrote it)."""
    cmd = item.get("command")
    if isinstance(cmd, list):
        words = [str(w) for w in cmd]
        cmd = words[-1] if len(words) == 3 and words[1] in ("-lc", "-c") else " ".join(words)
    code = item.get("exit_code")
    if isinstance(cmd, str) and isinstance(code, int) and not isinstance(code, bool) and code != -1:
        timeline.add("run", cmd, code == 0)


def _item(b: DigestBuilder, p: JSONObject, calls: list[JSONObject], timeline: Timeline) -> None:
    """A model-facing item: tool calls (names and, through harness/trace.py, commands and files read); user and
    assistant messages, used when the log has no user_message/agent_message events (user messages that open
    with a tag are Codex's own preambles: environment, instructions)."""
    sub = p.get("type")
    if sub in _TOOL_CALLS:
        b.tool(str(p.get("name") or sub))
        if p.get("name") == "apply_patch":
            timeline.add("patch", _patch_text(p))
        if sub == "function_call" and len(calls) < 4 * MAX_COMMANDS:
            calls.append({"type": "response_item", "payload": p})
    elif sub == "message" and p.get("role") in ("user", "assistant"):
        content = p.get("content")
        blocks = content if isinstance(content, list) else [{"text": content}] if isinstance(content, str) else []
        text = "\n".join(_text(c.get("text")) for c in blocks if isinstance(c, dict))
        if p["role"] == "assistant":
            timeline.add("reply_item", text)
        elif text.strip() and not text.lstrip().startswith("<"):
            timeline.add("user_item", text)
    elif sub not in _QUIET_ITEMS:
        b.unknown(f"response_item:{sub}")


def _patch_text(p: JSONObject) -> str:
    """An apply_patch call's patch: a custom tool's `input`, or a function call's arguments' `input`."""
    if isinstance(p.get("input"), str):
        return str(p["input"])
    try:
        args = json.loads(str(p.get("arguments") or "{}"))
    except ValueError:
        return ""
    return str(args.get("input") or "") if isinstance(args, dict) else ""


def _commands(b: DigestBuilder, calls: list[JSONObject]) -> None:
    t = trace.codex_session_trace(calls, b.digest.cwd)
    for cmd in t.commands:
        b.tool("", command=cmd)
    for f in t.files_read:
        b.tool("", file=f)
