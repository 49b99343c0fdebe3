"""The nights' state in the project (`<project>/.skillopt/nights.json`): the night in progress (so a killed night
resumes as the same run), how many nights there were, and how often each validation set was looked at."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.sleep.harvest.state import STATE_DIR

NIGHTS_FILE = "nights.json"


@dataclass
class Current:
    """A night started and not finished: rerunning resumes it (same run name, same task folder)."""

    run_name: str
    tasks: str
    started: str


@dataclass
class NightsState:
    nights: int = 0
    current: Optional[Current] = None
    val_looks: dict[str, int] = field(default_factory=dict)  # validation set fingerprint -> nights it decided


def path(project: Path) -> Path:
    return project / STATE_DIR / NIGHTS_FILE


def load(project: Path) -> NightsState:
    p = path(project)
    if not p.is_file():
        return NightsState()
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
        cur = raw.get("current")
        return NightsState(
            nights=int(raw.get("nights") or 0),
            current=Current(**cur) if isinstance(cur, dict) else None,
            val_looks={str(k): int(v) for k, v in (raw.get("val_looks") or {}).items()},
        )
    except (ValueError, TypeError) as e:
        raise ValueError(f"{p} is not a nights state ({e}); move it aside to start afresh") from None


def save(project: Path, st: NightsState) -> None:
    """Written whole or not at all (a kill mid-write leaves the old file)."""
    p = path(project)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    data: dict[str, Any] = asdict(st)
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, p)


def val_fingerprint(task_ids: list[str]) -> str:
    """The validation set's identity: the same tasks (in any order) give the same fingerprint."""
    return hashlib.sha256("\n".join(sorted(task_ids)).encode()).hexdigest()[:16]
