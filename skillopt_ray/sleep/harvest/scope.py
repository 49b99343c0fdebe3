"""Which sessions a harvest reads: those recorded in the project (or below it), within the time window."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional

SCOPES = ("invoked", "all")


@dataclass(frozen=True)
class Scope:
    """`invoked`: the project's folder and the folders inside it (a session started in a parent folder, such as the
    home folder, is not this project's; the reference counts it). `all`: every session of every folder."""

    project: str
    mode: str = "invoked"

    @classmethod
    def of(cls, project: Path, mode: str) -> Scope:
        return cls(os.path.realpath(project), mode)

    def __call__(self, cwd: str) -> bool:
        if self.mode == "all":
            return True
        where = os.path.realpath(os.path.expanduser(cwd))
        return where == self.project or where.startswith(self.project.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class Window:
    """Sessions active at some instant in [since, until]; since None: no lower bound. Aware UTC datetimes only."""

    since: Optional[datetime]
    until: datetime

    def holds(self, started: Optional[datetime], ended: Optional[datetime]) -> bool:
        if started is None and ended is None:
            return False
        first, last = started or ended, ended or started
        assert first is not None and last is not None
        return (self.since is None or last >= self.since) and first <= self.until

    def may_hold_file(self, path: Path) -> bool:
        """False when the file was last written before the window opened (it cannot hold a later event)."""
        if self.since is None:
            return True
        try:
            return path.stat().st_mtime >= self.since.timestamp()
        except OSError:
            return False
