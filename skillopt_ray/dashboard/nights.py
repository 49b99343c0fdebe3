"""The dashboard's Nights tab, read-only: a project's staged nights (`<project>/.skillopt/staging/<stamp>/`) as rows,
and one night's report.md and skill diff. Adoption stays a terminal command (`python -m skillopt_ray.sleep adopt`):
nothing here writes. A night's report is model-written text; it leaves here as JSON strings the page shows as text."""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.jsontypes import JSONObject, JSONValue

from skillopt_ray.sleep.proposal import staging, status

MAX_TEXT_BYTES = 1 << 20  # a report or a skill larger than this is shown cut (a real one is a few KiB)
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
    return {"project": st["project"], "nights": rows, "interrupted": st["interrupted"]}


def find_night(project: Optional[Path], stamp: str) -> Path:
    """A staged night by its stamp, only among `staging.nights` (so never a path): KeyError otherwise."""
    if project is None:
        raise KeyError(stamp)
    for night in staging.nights(project):
        if night.name == stamp:
            return night
    raise KeyError(stamp[:80])


def _read(path: Path) -> Optional[bytes]:
    """A regular file's bytes (at most MAX_TEXT_BYTES + 1), never through a symlink; None when there is none."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with open(path, "rb") as f:
            return f.read(MAX_TEXT_BYTES + 1)
    except OSError:
        return None


def _text(data: Optional[bytes]) -> str:
    if data is None:
        return ""
    cut = len(data) > MAX_TEXT_BYTES
    return data[:MAX_TEXT_BYTES].decode("utf-8", errors="replace") + ("\n[... cut]" if cut else "")


def _base(night: Path, index: int, row: Mapping[str, Any]) -> tuple[str, str]:
    """(the text the proposal replaces, where it came from): the live file or adoption's backup copy, read only when
    its sha256 is the one staging pinned, so a manifest cannot make the page show some other file."""
    pin = str(row.get("live_sha256") or "")
    if pin == staging.ABSENT:
        return "", "absent"
    for path in (Path(str(row.get("live_path") or "")), night / "backup" / str(index)):
        data = _read(path)
        if data is not None and len(data) <= MAX_TEXT_BYTES and hashlib.sha256(data).hexdigest() == pin:
            return _text(data), str(path)
    return "", "gone (the file staging saw is no longer on disk; the proposal is shown whole)"


def night_detail(night: Path) -> JSONObject:
    """One staged night: its row, report.md as text, and a unified diff per proposed file against what it replaces."""
    m = staging.load_manifest(night)
    diffs = []
    for i, row in enumerate(m.get("files") or []):
        if not isinstance(row, dict):
            continue
        rel = str(row.get("rel") or "")
        proposed = _text(_read(night / rel)) if rel and ".." not in Path(rel).parts else ""
        base, source = _base(night, i, row)
        text = "".join(
            difflib.unified_diff(
                base.splitlines(keepends=True),
                proposed.splitlines(keepends=True),
                fromfile=f"live {row.get('live_path', '')}",
                tofile=f"staged {rel}",
            )
        )
        diffs.append({"rel": rel, "live_path": str(row.get("live_path") or ""), "base": source, "diff": text})
    return {
        "stamp": m["stamp"],
        "skill": m.get("skill_name"),
        "verdict": m.get("verdict"),
        "verified": m.get("verified"),
        "summary": m.get("summary") or {},
        "state": status.night_state(night, m),
        "report_md": _text(_read(night / "report.md")),
        "diffs": diffs,
    }
