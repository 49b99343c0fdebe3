"""A bounded, redacted summary of one session: what the miner reads, never the raw transcript."""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional, TypedDict

from skillopt_ray.sleep.harvest.replay import MAX_EDIT_CHARS, FileEdit
from skillopt_ray.sleep.harvest.timeutil import parse_instant, stamp

MAX_REQUESTS = 6  # the reference's miner reads the first six user prompts
MAX_REPLIES = 3
MAX_TEXT = 800
MAX_CORRECTION = 200
MAX_COMMAND = 300
MAX_CORRECTIONS = 6
MAX_FILES = 20
MAX_COMMANDS = 20
MAX_RUNS = 40  # commands with their recorded exit status, in order

# what a user says when the agent got it wrong, and when it got it right (English; first words of a turn)
_NEGATIVE = re.compile(
    r"(?i)^\s*(?:no\b|nope\b|wrong\b|that'?s (?:not|wrong)|still (?:fail|broken|not|wrong|doesn)|it (?:still )?"
    r"(?:doesn'?t|does not|didn'?t) work|revert\b|undo\b|not what i|stop\b|why did you|\[request interrupted)"
)
_SKILL_READ = re.compile(r"skills/([\w.\-]+)/SKILL\.md")
_POSITIVE = re.compile(r"(?i)^\s*(?:thanks|thank you|lgtm|perfect|great|works now|looks good|nice\b|ship it)")


class CommandRun(TypedDict):
    """A command the agent ran, whether it exited 0, and the user turn it ran in (1 = after the first request)."""

    command: str
    ok: bool
    turn: int


@dataclass
class SessionDigest:
    """One session as the miner sees it. Every text in it has been through the redactor."""

    source: str  # codex | claude_code
    session_id: str
    path: str
    cwd: str = ""
    started: Optional[datetime] = None
    ended: Optional[datetime] = None
    git_commit: str = ""
    git_branch: str = ""
    requests: list[str] = field(default_factory=list)
    corrections: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    tools: dict[str, int] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    slash_commands: list[str] = field(default_factory=list)  # what the user typed as /name (Claude Code)
    runs: list[CommandRun] = field(default_factory=list)
    accepted_reply: str = ""  # the agent's last reply before the user's thanks (the outcome they accepted)
    corrected_replies: list[str] = field(default_factory=list)  # its last reply before each correction
    correction_turns: list[int] = field(default_factory=list)  # the user turns that corrected
    accepted_turn: int = 0  # the user turn that thanked (0: none)
    edits: list[FileEdit] = field(default_factory=list)  # the session's file edits in order (never sent or written)
    edits_whole: bool = True  # False when an edit could not be kept (too long, a path outside the session's folder)
    user_turns: int = 0
    positive: int = 0
    negative: int = 0
    unknown_kinds: dict[str, int] = field(default_factory=dict)
    skipped_lines: dict[str, int] = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """satisfied / corrected / unknown, from the user's own words."""
        if self.negative:
            return "corrected"
        return "satisfied" if self.positive else "unknown"

    def summary(self) -> dict[str, Any]:
        """The digest as plain data (for the harvest report and the miner's prompt)."""
        return {
            "source": self.source,
            "session_id": self.session_id,
            "started": stamp(self.started) if self.started else None,
            "ended": stamp(self.ended) if self.ended else None,
            "requests": self.requests,
            "corrections": self.corrections,
            "last_replies": self.replies,
            "tools": self.tools,
            "commands": self.commands,
            "command_results": [{"command": r["command"], "exit": "ok" if r["ok"] else "failed"} for r in self.runs],
            "files": self.files,
            "skills": self.skills,
            "outcome": self.outcome,
        }


@dataclass
class DigestBuilder:
    """Fills a SessionDigest record by record, keeping only bounded, redacted text. Every text is redacted whole
    and cut afterwards: a cut first would leave the part of a secret before it, which no pattern recognises."""

    digest: SessionDigest
    redact: Callable[[str], str]
    _replies: deque = field(default_factory=lambda: deque(maxlen=MAX_REPLIES))
    _tools: Counter = field(default_factory=Counter)
    _unknown: Counter = field(default_factory=Counter)
    _last: Any = None  # the latest record's stamp, as written
    _pending: tuple[str, bool] = ("", False)  # the agent's latest reply since the user's last turn, and whether it
    # was redacted already (the outcome that turn answers)
    _edit_chars: int = 0

    def time(self, value: Any) -> None:
        """A record's stamp. Logs are appended in order: the first stamp is parsed now, the latest when the session
        ends (parsing every record's stamp was a fifth of a harvest's time); both compared as instants."""
        if value is None:
            return
        if self.digest.started is None:
            self._widen(parse_instant(value))
        else:
            self._last = value

    def instant(self, value: Any) -> None:
        """A stamp parsed at once (a session's own start, which may precede its first record's)."""
        self._widen(parse_instant(value))

    def _widen(self, t: Optional[datetime]) -> None:
        if t is None:
            return
        d = self.digest
        if d.started is None or t < d.started:
            d.started = t
        if d.ended is None or t > d.ended:
            d.ended = t

    def held(self, text: str, tail: bool = False) -> tuple[str, Counter]:
        """`text` redacted whole, then cut to MAX_TEXT (its end when `tail`), for later use, and what its redaction
        counted, taken back out of the redactor's counts until it is used (a held text never used counts nothing)."""
        counts = getattr(self.redact, "counts", None)
        before = Counter(counts) if isinstance(counts, Counter) else None
        whole = self.redact(text)
        out = whole[-MAX_TEXT:] if tail else whole[:MAX_TEXT]
        if before is None or not isinstance(counts, Counter):
            return out, Counter()
        delta = counts - before
        counts.subtract(delta)
        return out, delta

    def _count(self, counted: Optional[Counter]) -> None:
        counts = getattr(self.redact, "counts", None)
        if counted and isinstance(counts, Counter):
            counts.update(counted)

    def _reply_text(self, text: str, redacted: bool) -> str:
        return (text if redacted else self.redact(text))[-MAX_TEXT:]

    def user(self, text: str, redacted: bool = False, counted: Optional[Counter] = None) -> None:
        """A turn the user typed: a request (the first few), and a correction or thanks after the first.
        `redacted`: the text was redacted already (held), `counted` what that redaction counted."""
        self._count(counted)
        text = (text or "").strip()
        clean = (lambda t: t) if redacted else self.redact
        if not text:
            return
        d = self.digest
        d.user_turns += 1
        pending, done = self._pending
        if d.user_turns > 1:
            if _NEGATIVE.search(text):
                d.negative += 1
                if len(d.corrections) < MAX_CORRECTIONS:
                    d.corrections.append(clean(text)[:MAX_CORRECTION])
                    d.correction_turns.append(d.user_turns)
                    if pending:
                        d.corrected_replies.append(self._reply_text(pending, done))
            elif _POSITIVE.search(text):
                d.positive += 1
                d.accepted_turn = d.user_turns
                if pending:
                    d.accepted_reply = self._reply_text(pending, done)
        self._pending = ("", False)
        if len(d.requests) < MAX_REQUESTS:
            d.requests.append(clean(text)[:MAX_TEXT])

    def reply(self, text: str, redacted: bool = False, counted: Optional[Counter] = None) -> None:
        """One of the agent's replies, kept whole (redacted, then cut, when the session ends) unless `redacted`."""
        self._count(counted)
        if text and text.strip():
            self._replies.append((text.strip(), redacted))
            self._pending = (text.strip(), redacted)

    def ran(self, command: str, ok: bool, redacted: bool = False, counted: Optional[Counter] = None) -> None:
        """A command with its recorded exit status (0: ok), in the order the session ran them."""
        self._count(counted)
        d = self.digest
        if command.strip() and len(d.runs) < MAX_RUNS:
            text = command.strip() if redacted else self.redact(command.strip())
            d.runs.append({"command": text[:MAX_COMMAND], "ok": ok, "turn": d.user_turns})

    def has_replies(self) -> bool:
        return bool(self._replies)

    def tool(self, name: str, command: str = "", file: str = "") -> None:
        """A tool call's name, and the command it ran or the file it touched (a SKILL.md read names a skill)."""
        if name:
            self._tools[name] += 1
        m = _SKILL_READ.search(command or file)
        if m:
            self.skill(m.group(1))
        d = self.digest
        if command and len(d.commands) < MAX_COMMANDS:
            d.commands.append(self.redact(command)[:MAX_COMMAND])
        if file and len(d.files) < MAX_FILES and file not in d.files:
            d.files.append(self.redact(file)[:MAX_COMMAND])

    def edit(self, e: FileEdit) -> None:
        """A file edit that succeeded, kept for the workspace replay (replay.py) while the session's edits fit."""
        d = self.digest
        self._edit_chars += len(e["old"]) + len(e["new"])
        unreadable = not e["new"] if e["op"] == "patch" else not e["path"]
        if unreadable or self._edit_chars > MAX_EDIT_CHARS:
            d.edits_whole, d.edits = False, []
        if d.edits_whole:
            d.edits.append({**e, "turn": d.user_turns})

    def slash(self, name: str) -> None:
        """A slash command the user typed (its name only: its arguments may hold anything)."""
        if name and len(self.digest.slash_commands) < MAX_COMMANDS:
            self.digest.slash_commands.append(name[:100])

    def skill(self, name: str) -> None:
        if name and name not in self.digest.skills:
            self.digest.skills.append(name[:100])

    def unknown(self, kind: str) -> None:
        self._unknown[kind[:60]] += 1

    def finish(self, skipped: Counter) -> SessionDigest:
        self._widen(parse_instant(self._last))
        d = self.digest
        d.replies = [self._reply_text(r, done) for r, done in self._replies]
        d.tools = dict(self._tools)
        d.unknown_kinds = dict(self._unknown)
        d.skipped_lines = dict(skipped)
        return d
