"""The dashboard's Nights tab, read-only: a project's staged nights (`<project>/.skillopt/staging/<stamp>/`) as rows,
and one night's report.md and skill diff. Adoption stays a terminal command (`python -m skillopt_ray.sleep adopt`):
nothing here writes. A night's report is model-written text; it leaves here as JSON strings the page shows as text."""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.jsontypes import JSONObject, JSONValue

from skillopt_ray.base import untrusted
from skillopt_ray.sleep.proposal import staging, status
from skillopt_ray.sleep.proposal.adopt import Refused, read_json
from skillopt_ray.sleep.proposal.adopt_skills import RECEIPTS, receipt_names

MAX_TEXT_BYTES = 1 << 20  # a report or a skill larger than this is not shown (a real one is a few KiB)
MAX_DIFF_ROWS = 50  # a night proposes one skill folder of a few files; the diffs past this many are left out
MAX_TOTAL_BYTES = 4 << 20  # the texts diffed for one answer, over every file
NIGHTS_DIR = Path(".skillopt") / "nights"


def project_for(outputs: Path, cwd: Path) -> Optional[Path]:
    """The project whose nights are shown when none is given: the one whose `.skillopt/nights` is the output folder
    (as docs/sleep.md starts the dashboard), else the working folder if it has staged nights."""
    outputs = outputs.resolve()
    if outputs.parts[-2:] == NIGHTS_DIR.parts:
        return outputs.parent.parent
    return cwd.resolve() if staging.staging_root(cwd).is_dir() else None


def night_rows(project: Optional[Path]) -> JSONObject:
    """The staged nights, oldest first, with their scores, interval, verdict and adopted / undone / pending state."""
    if project is None:
        return {"project": None, "nights": [], "interrupted": None}
    st = status.collect(project)
    rows: list[JSONValue] = [
        {"stamp": r.get("stamp"), "skill": r.get("skill"), "verdict": r.get("verdict"), "verified": r.get("verified"),
         "summary": r.get("summary"), "state": r.get("state")}
        for r in st["nights"]
    ]  # fmt: skip
    return {"project": st["project"], "nights": rows, "interrupted": st["interrupted"],
            "interrupted_problem": st["interrupted_problem"]}  # fmt: skip


def find_night(project: Optional[Path], stamp: str) -> Path:
    """A staged night by its stamp, only among `staging.nights` (so never a path): KeyError otherwise."""
    if project is None:
        raise KeyError(stamp)
    for night in staging.nights(project):
        if night.name == stamp:
            return night
    raise KeyError(stamp[:80])


def _read(root: Path, rel: str) -> Optional[bytes]:
    """A regular file's bytes under `root` (at most MAX_TEXT_BYTES + 1), read as an untrusted file: no absolute path,
    no `..`, no symlink at any level, no FIFO or device; None when there is none or it is refused."""
    try:
        return untrusted.read_bytes(root, rel, limit=MAX_TEXT_BYTES)
    except untrusted.Untrusted:
        return None


def _text(data: Optional[bytes]) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", errors="replace")


def _live_bytes(m: Mapping[str, Any], row: Mapping[str, Any]) -> Optional[bytes]:
    """The live file a row replaces, read only under the skill root (or the project, for a memory file) the sealed
    manifest names, reached through plain folders from there."""
    live, root = str(row.get("live_path") or ""), str(row.get("root") or "")
    roots = [*m.get("skill_roots", []), m.get("project")] if row.get("kind") == "memory" else m.get("skill_roots", [])
    if root not in roots or not staging.within(live, root) or live == root:
        return None
    return _read(Path(root), os.path.relpath(live, root))


def _backups(night: Path, index: int, row: Mapping[str, Any]) -> list[str]:
    """Where adoption may have copied the file a row replaced, relative to the night: `backup/<i>` for a night of one
    skill; for a night of several, `backup/<receipt>/<i>` for each sealed adopt receipt with a step for the row's live
    path (each adoption numbers its own steps from 0). Only candidates: `_base` still checks the pin."""
    if not untrusted.is_dir(night, RECEIPTS):
        return [f"backup/{index}"]
    out = []
    for name in [n for n in receipt_names(night) if n.endswith("-adopt.json")][:MAX_DIFF_ROWS]:
        try:
            steps = read_json(night / RECEIPTS / name).get("steps")
        except Refused:  # unsealed or edited: its word names no backup (the pin check below would hold anyway)
            continue
        for i, s in enumerate(steps[:MAX_DIFF_ROWS] if isinstance(steps, list) else []):
            if isinstance(s, dict) and s.get("live") == row.get("live_path"):
                out.append(f"backup/{name[: -len('.json')]}/{i}")
    return out


class KeptBackups:
    """Every backup copy on disk (`backup/<i>`, `backup/<receipt>/<i>`) by its sha256, read once per answer and only
    when needed: the fallback when the receipt naming a row's backup cannot be read (truncated, unsealed). Safe to
    offer, since a copy is shown only for the pin staging sealed; a planted file there cannot match it. Bounded: at
    most MAX_DIFF_ROWS files, MAX_TEXT_BYTES each, MAX_TOTAL_BYTES in all."""

    def __init__(self, night: Path):
        self.night = night
        self._by_pin: Optional[dict[str, tuple[bytes, str]]] = None

    def find(self, pin: str) -> Optional[tuple[bytes, str]]:
        """(the copy's bytes, its path in the night) whose sha256 is `pin`, as the scan read and hashed them."""
        if self._by_pin is None:
            self._by_pin = self._scan()
        return self._by_pin.get(pin)

    def _scan(self) -> dict[str, tuple[bytes, str]]:
        rels: list[str] = []
        for e in untrusted.list_dir(self.night, "backup", MAX_DIFF_ROWS):
            if len(rels) >= MAX_DIFF_ROWS:
                break
            if e.is_file:
                rels.append(f"backup/{e.name}")
            elif e.is_dir:
                rels += [
                    f"backup/{e.name}/{f.name}"
                    for f in untrusted.list_dir(self.night, f"backup/{e.name}", MAX_DIFF_ROWS)
                ]
        out: dict[str, tuple[bytes, str]] = {}
        budget = MAX_TOTAL_BYTES
        for rel in rels[:MAX_DIFF_ROWS]:
            data = _read(self.night, rel) if budget > 0 else None
            if data is not None:
                budget -= len(data)
                out.setdefault(hashlib.sha256(data).hexdigest(), (data, rel))
        return out


def _base(night: Path, index: int, m: Mapping[str, Any], row: Mapping[str, Any], kept: KeptBackups) -> tuple[str, str]:
    """(the text the proposal replaces, where it came from): the live file or adoption's backup copy, read only when
    its sha256 is the one staging pinned, so a manifest cannot make the page show some other file."""
    pin = str(row.get("live_sha256") or "")
    if pin == staging.ABSENT:
        return "", "absent"
    data = _live_bytes(m, row)
    if data is not None and hashlib.sha256(data).hexdigest() == pin:
        return _text(data), str(row.get("live_path"))
    for rel in _backups(night, index, row):
        data = _read(night, rel)
        if data is not None and hashlib.sha256(data).hexdigest() == pin:
            return _text(data), str(night / rel)
    found = kept.find(pin)
    if found is not None:
        return _text(found[0]), str(night / found[1])
    return "", "gone (the file staging saw is no longer on disk; the proposal is shown whole)"


def night_detail(night: Path) -> JSONObject:
    """One staged night: its row, report.md as text, and a unified diff per proposed file against what it replaces.
    A manifest that cannot be trusted is the night's state (why, in one line), with nothing else shown from it."""
    try:
        m = staging.load_manifest(night)
    except ValueError as e:
        return {"stamp": night.name, "skill": None, "verdict": None, "verified": None, "summary": {},
                "state": status.problem_line(e), "report_md": "", "diffs": []}  # fmt: skip
    diffs: list[JSONValue] = []
    budget = MAX_TOTAL_BYTES
    kept = KeptBackups(night)
    for i, row in enumerate(m["files"][:MAX_DIFF_ROWS]):
        rel = str(row.get("rel") or "")
        proposed = _text(_read(night, rel)) if budget > 0 else ""
        base, source = _base(night, i, m, row, kept) if budget > 0 else ("", "left out")
        budget -= len(proposed) + len(base)
        if budget < 0:
            note = f"left out: the night's files are over {MAX_TOTAL_BYTES >> 20} MiB in all; read them in {night}"
            diffs.append({"rel": rel, "live_path": str(row.get("live_path") or ""), "base": note, "diff": ""})
            continue
        text = "".join(
            difflib.unified_diff(
                base.splitlines(keepends=True),
                proposed.splitlines(keepends=True),
                fromfile=f"live {row.get('live_path', '')}",
                tofile=f"staged {rel}",
            )
        )
        diffs.append({"rel": rel, "live_path": str(row.get("live_path") or ""), "base": source, "diff": text})
    if len(m["files"]) > MAX_DIFF_ROWS:
        more = len(m["files"]) - MAX_DIFF_ROWS
        diffs.append(
            {"rel": "", "live_path": "", "base": f"left out: {more} more files; read them in {night}", "diff": ""}
        )
    return {
        "stamp": m["stamp"],
        "skill": m.get("skill_name"),
        "verdict": m.get("verdict"),
        "verified": m.get("verified"),
        "summary": m.get("summary") or {},
        "state": status.night_state(night, m),
        "report_md": _text(_read(night, "report.md")),
        "diffs": diffs,
    }
