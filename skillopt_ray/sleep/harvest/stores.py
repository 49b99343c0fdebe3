"""Reading the session stores: every in-scope, in-window session once, with counts of what was left out."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Optional

from skillopt_ray.sleep.harvest.digest import SessionDigest
from skillopt_ray.sleep.harvest.redact import Redactor
from skillopt_ray.sleep.harvest.scope import Scope, Window
from skillopt_ray.sleep.harvest.sources import claude, codex

SOURCES = ("codex", "claude_code", "all")
# sleep's own commands: `python -m skillopt_ray.sleep ...`, the plugin's launcher and slash commands
# (/skillopt-sleep:status), the Codex skill's folder (skills/skillopt-sleep/SKILL.md read before running it)
_SLEEP_OWN = re.compile(r"skillopt_ray\.sleep\b|(?<![\w-])/?skillopt-sleep(?![\w-])")


@dataclass
class HarvestCounts:
    """What the harvest saw and why it left things out (the report's numbers)."""

    files: Counter = field(default_factory=Counter)  # per source
    sessions: Counter = field(default_factory=Counter)  # kept, per source
    out_of_scope: int = 0
    out_of_window: int = 0
    duplicates: int = 0
    unknown_kinds: Counter = field(default_factory=Counter)
    skipped_lines: Counter = field(default_factory=Counter)
    unreadable: int = 0
    sleep_sessions: int = 0  # sessions that only ran sleep itself (its status, a night, an adoption)


@dataclass(frozen=True)
class Stores:
    """Where each CLI keeps its sessions and which of them to read."""

    source: str = "all"
    codex_home: Optional[Path] = None
    claude_home: Optional[Path] = None

    def homes(self) -> dict[str, Path]:
        """Each chosen source's store folder."""
        out: dict[str, Path] = {}
        if self.source in ("codex", "all"):
            out[codex.SOURCE] = codex.home(_s(self.codex_home))
        if self.source in ("claude_code", "all"):
            out[claude.SOURCE] = claude.home(_s(self.claude_home))
        return out

    def readers(self) -> list[tuple[str, list[Path], Callable]]:
        out: list[tuple[str, list[Path], Callable]] = []
        if self.source in ("codex", "all"):
            out.append((codex.SOURCE, list(codex.session_files(codex.home(_s(self.codex_home)))), codex.parse))
        if self.source in ("claude_code", "all"):
            out.append((claude.SOURCE, list(claude.session_files(claude.home(_s(self.claude_home)))), claude.parse))
        return out


def _s(p: Optional[Path]) -> Optional[str]:
    return str(p) if p else None


def collect(
    stores: Stores, scope: Scope, window: Window, redactor: Redactor, max_sessions: int = 0
) -> tuple[list[SessionDigest], HarvestCounts]:
    """The in-scope sessions of the window, newest first, one per (source, session id): a session both in Codex's
    dated tree and its archive is read once (the longer copy wins)."""
    counts = HarvestCounts()
    kept: dict[tuple[str, str], SessionDigest] = {}
    for source, files, parse in stores.readers():
        counts.files[source] += len(files)
        for path in files:
            if not window.may_hold_file(path):
                counts.out_of_window += 1
                continue
            try:
                d = parse(path, redactor, scope)
            except OSError:
                counts.unreadable += 1
                continue
            if d is None:
                counts.out_of_scope += 1
                continue
            _tally(counts, d)
            if not window.holds(d.started, d.ended):
                counts.out_of_window += 1
                continue
            key = (d.source, d.session_id)
            if key in kept:
                counts.duplicates += 1
                if d.user_turns + len(d.replies) <= kept[key].user_turns + len(kept[key].replies):
                    continue
            kept[key] = d
    own = [k for k, d in kept.items() if sleep_own(d)]
    counts.sleep_sessions = len(own)
    for k in own:  # asking sleep for its status is not a task to learn from
        del kept[k]
    out = sorted(kept.values(), key=_newest, reverse=True)
    if max_sessions and len(out) > max_sessions:
        out = out[:max_sessions]
    for d in out:
        counts.sessions[d.source] += 1
    return out, counts


def sleep_own(d: SessionDigest) -> bool:
    """The session ran sleep and nothing else: each command and each slash command it ran was sleep's own."""
    ran = d.commands + d.slash_commands
    return bool(ran) and all(_SLEEP_OWN.search(c) for c in ran)


def _newest(d: SessionDigest) -> datetime:
    """A kept session's last instant (every kept session has one: the window needs it)."""
    t = d.ended or d.started
    assert t is not None
    return t


def _tally(counts: HarvestCounts, d: SessionDigest) -> None:
    counts.unknown_kinds.update(d.unknown_kinds)
    counts.skipped_lines.update(d.skipped_lines)
