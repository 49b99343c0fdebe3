"""Start-up marks for `scripts/bench_startup.py`: where the seconds before the first episode go.

When SKILLOPT_STARTUP_TRACE names a file, `mark(label)` appends `label wall-clock-time pid` to it,
from any process of the run (the CLI, the driver actor, env actors: Ray workers of a local cluster
inherit the variable). Unset, a mark costs one environment lookup."""

from __future__ import annotations

import os
import time

ENV = "SKILLOPT_STARTUP_TRACE"


def mark(label: str) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:  # one short line per write: appends from several processes stay whole
        f.write(f"{label} {time.time():.4f} {os.getpid()}\n")


def read(path: str, since: float) -> dict[str, float]:
    """Seconds from `since` to the first occurrence of each label."""
    out: dict[str, float] = {}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            out.setdefault(parts[0], float(parts[1]) - since)
    return out
