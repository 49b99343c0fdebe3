"""`status`: the project's staged nights, their scores and verdicts, which are adopted, undone or pending, and whether
a pending one still applies (its pins match the live files). Read-only: it recovers nothing, it says what to run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, TypedDict

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base import untrusted
from skillopt_ray.sleep.proposal import seal, staging
from skillopt_ray.sleep.proposal.adopt import ADOPTED, UNDONE, Refused, read_json, wal_path
from skillopt_ray.sleep.proposal.staging import StagedManifest, file_pin
from skillopt_ray.sleep.proposal.staging_skills import entries, entry_view


class NightRow(TypedDict, total=False):
    """One staged night as `status` lists it (an unreadable one has its stamp and state only)."""

    stamp: str
    skill: str
    live_skill_dir: str
    verdict: str
    verified: bool
    summary: JSONObject
    state: str
    folder: str
    memory: str  # the memory file the night proposes a block for, and the block's size
    flags: list[str]  # why its added rules need a person's eyes (adopt needs --allow-flagged)


class NightsStatus(TypedDict):
    """What `status --json` prints."""

    project: str
    nights: list[NightRow]
    pending: list[str]
    interrupted: Optional[str]
    interrupted_problem: Optional[str]  # the write-ahead record is not one this machine sealed: why


FORGED = "unreadable/forged"


def forged(why: str) -> str:
    return f"{FORGED}: {(why.splitlines() or [''])[0][:400]}"


def problem_line(e: BaseException) -> str:
    """A file that cannot be trusted, as its item's state in one line: what an old unsealed night is, plainly;
    anything else unreadable or forged, and why."""
    return str(e).splitlines()[0] if isinstance(e, seal.StagedBeforeSeals) else forged(str(e))


def receipt_state(night: Path, name: str) -> Optional[str]:
    """None when the night has no such receipt, "" when it has one this machine sealed, else why it is not trusted
    (a planted or damaged receipt says nothing about the night)."""
    if not os.path.lexists(night / name):
        return None
    try:
        read_json(night / name)
    except Refused as e:
        return problem_line(e)
    return ""


def night_state(night: Path, m: StagedManifest) -> str:
    """The night's state in one line, never an exception: a receipt that cannot be trusted is named in it (adoption
    refuses the night until it is deleted)."""
    try:
        return _state(night, m)
    except ValueError as e:  # a live file turned into a FIFO or a symlink since staging
        return problem_line(e)


def _state(night: Path, m: StagedManifest) -> str:
    if entries(m):  # a night of several skills: each skill's state
        from skillopt_ray.sleep.proposal.adopt_skills import skill_states

        problems: list[str] = []
        by: dict[str, list[str]] = {}
        for name, state in skill_states(night, m, problems).items():
            by.setdefault(state, []).append(name)
        parts = [f"{state}: {', '.join(names)}" for state, names in sorted(by.items())]
        return "; ".join(parts + [forged(p) for p in problems])
    undone, adopted = receipt_state(night, UNDONE), receipt_state(night, ADOPTED)
    if undone or adopted:
        return str(undone or adopted)
    if undone is not None:
        return "undone"
    if adopted is not None:
        return "adopted"
    if staging.first_install(m):
        return "pending (changed nothing; adopting installs the skill it started from: no skill is live yet)"
    if staging.unchanged(m):
        return "changed nothing (nothing to adopt)"
    stale = any(_pin(r["live_path"]) != r["live_sha256"] for r in m["files"])
    return "pending (stale: the live skill changed since staging)" if stale else "pending"


def _pin(path: str) -> str:
    """The live file's pin; a symlink, folder or FIFO put there since staging is simply not the pinned file."""
    try:
        return file_pin(Path(path))
    except ValueError:
        return "not a plain file"


def night_rows(night: Path) -> list[NightRow]:
    """One night as `status` lists it (a row per skill for a night of several); ValueError when its manifest or a
    file it pins cannot be read."""
    m = staging.load_manifest(night)
    if entries(m):
        return skill_rows(night, m)
    row: NightRow = {
        "stamp": m["stamp"],
        "skill": m["skill_name"],
        "live_skill_dir": m["live_skill_dir"],
        "verdict": m["verdict"],
        "verified": m["verified"],
        "summary": m["summary"],
        "state": night_state(night, m),
        "folder": str(night),
    }
    note = memory_note(night, m)
    if note:
        row["memory"] = note
    flags = m.get("flags")
    if isinstance(flags, list) and flags:
        row["flags"] = [str(f)[:300] for f in flags[:20]]
    return [row]


def collect(project: Path) -> NightsStatus:
    rows: list[NightRow] = []
    for night in staging.nights(project):
        try:
            rows += night_rows(night)
        except (ValueError, KeyError, TypeError) as e:  # one unreadable night is a row saying why; the rest are listed
            rows.append({"stamp": night.name, "state": problem_line(e)})
    wal = wal_path(project)
    return {
        "project": str(project.resolve()),
        "nights": rows,
        "pending": list(dict.fromkeys(r["stamp"] for r in rows if str(r["state"]).startswith("pending"))),
        "interrupted": str(wal) if os.path.lexists(wal) else None,
        "interrupted_problem": receipt_state(wal.parent, wal.name) or None,
    }


def skill_rows(night: Path, m: StagedManifest) -> list[NightRow]:
    """A night that trained several skills: one row per skill, its state read from the night's receipts."""
    from skillopt_ray.sleep.proposal.adopt_skills import skill_states

    problems: list[str] = []
    states = skill_states(night, m, problems)
    out: list[NightRow] = []
    for e in entries(m):
        state = states[e["skill_name"]]
        if state == "unchanged":
            state = "changed nothing (nothing to adopt)"
        elif state == "pending":
            state = night_state(night, entry_view(m, e))  # as a night of this skill alone: stale, first install
        out.append({"stamp": m["stamp"], "skill": e["skill_name"], "live_skill_dir": e["live_skill_dir"],
                    "verdict": e["verdict"], "verified": e["verified"], "summary": e["summary"], "state": state,
                    "folder": str(night)})  # fmt: skip
    return out + [{"stamp": m["stamp"], "state": forged(p)} for p in problems]


def memory_note(night: Path, m: StagedManifest) -> Optional[str]:
    """The staged memory block in one line: which file, which block, how many lines it proposes."""
    from skillopt_ray.sleep.proposal import memory

    for row in m["files"]:
        if row["kind"] != "memory":
            continue
        try:
            inner = memory.block_text(untrusted.read_text(night, row["rel"], 1 << 20), m["skill_name"])
        except (OSError, ValueError) as e:  # untrusted.Untrusted and MemoryRefused are ValueErrors
            return f"{row['live_path']}: unreadable staged block ({e})"
        return f"{row['live_path']}: block {m['skill_name']!r}, {len((inner or '').splitlines())} lines"
    return None


def _num(value: object, sign: str = "") -> str:
    return format(value, f"{sign}.3f") if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def fmt_summary(s: JSONObject) -> str:
    parts = []
    if "before" in s and "after" in s:
        parts.append(f"score {_num(s['before'])} -> {_num(s['after'])}")
    if s.get("mean_diff") is not None:
        parts.append(f"paired diff {_num(s['mean_diff'], '+')} [{_num(s.get('lo'), '+')}, {_num(s.get('hi'), '+')}]")
    return "; ".join(parts)


def render(st: NightsStatus) -> str:
    if not st["nights"]:
        return f"no staged nights in {staging.staging_root(Path(st['project']))}"
    lines = []
    for r in st["nights"]:
        if "verdict" not in r:
            lines.append(f"{r['stamp']}  {r['state']}")
            continue
        extra = fmt_summary(r["summary"])
        lines.append(f"{r['stamp']}  {r['skill']}  {r['verdict']}  {r['state']}" + (f"  ({extra})" if extra else ""))
        if r.get("memory"):
            lines.append(f"  memory {r['memory']}")
        for flag in r.get("flags") or []:
            lines.append(f"  FLAGGED {flag} (adopt needs --allow-flagged)")
    if st["pending"]:
        lines.append(f"pending: {', '.join(st['pending'])} (adopt with: python -m skillopt_ray.sleep adopt --project "
                     f"{st['project']} --night STAMP, and --skill NAME for one skill of a night that trained several)")  # fmt: skip
    if st["interrupted_problem"]:
        lines.append(f"an adoption record that cannot be trusted: {st['interrupted_problem']}")
    elif st["interrupted"]:
        lines.append(f"an adoption was interrupted ({st['interrupted']}); the next `adopt` rolls it back")
    return "\n".join(lines)


def status(project: Path, as_json: bool) -> str:
    st = collect(project)
    return json.dumps(st, indent=1, sort_keys=True) if as_json else render(st)
