"""A project's harvest state in `<project>/.skillopt/` (not one global file): the last harvest's instant and every
task's split, so a window continues where the last one ended and a validation task stays one."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Optional

from skillopt_ray.sleep.harvest.timeutil import parse_instant, stamp

STATE_DIR = ".skillopt"
STATE_FILE = "harvest-state.json"


@dataclass
class HarvestState:
    last_harvest: Optional[datetime] = None
    splits: dict[str, str] = field(default_factory=dict)  # task id -> train | val | test, fixed once given
    harvests: int = 0
    digest_hosts: list[str] = field(default_factory=list)  # remote optimizers the user allowed with --send-digests


def state_path(project: Path) -> Path:
    return project / STATE_DIR / STATE_FILE


def load(project: Path) -> HarvestState:
    """The saved state; a missing file is a first harvest. A broken one is an error naming it (never reset)."""
    path = state_path(project)
    if not path.exists():
        return HarvestState()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return HarvestState(
            parse_instant(raw.get("last_harvest")),
            dict(raw.get("splits") or {}),
            int(raw.get("harvests") or 0),
            [str(h) for h in raw.get("digest_hosts") or []],
        )
    except (ValueError, TypeError, AttributeError, OSError) as e:
        raise ValueError(
            f"{path} is not a harvest state file ({e}); fix or delete it (the next harvest starts over)"
        ) from None


def save(project: Path, state: HarvestState) -> None:
    """Written whole to a temporary file, then renamed over the old one: a kill leaves one or the other."""
    path = state_path(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "last_harvest": stamp(state.last_harvest) if state.last_harvest else None,
        "splits": state.splits,
        "harvests": state.harvests,
        "digest_hosts": state.digest_hosts,
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".harvest-state.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
