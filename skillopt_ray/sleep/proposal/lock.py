"""Per-project locks in `<project>/.skillopt/locks/`: one night at a time, one adoption at a time. An OS file lock
(flock), so a killed holder releases it by dying: no stale lock to clear by hand."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

LOCKS = Path(".skillopt") / "locks"


class Busy(RuntimeError):
    """Another process holds the lock; the message is the one line to print."""


def holder(path: Path) -> str:
    try:
        pid = path.read_text(encoding="utf-8").strip()
    except OSError:
        pid = ""
    return f" (pid {pid})" if pid.isdigit() else ""


@contextmanager
def project_lock(project: Path, name: str, what: str) -> Iterator[Path]:
    """Holds `<project>/.skillopt/locks/<name>.lock` for the block, or raises Busy naming `what` and the holder."""
    folder = project.resolve() / LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Busy(f"{what} is already running for {project}{holder(path)}; wait for it to finish") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield path
    finally:
        os.close(fd)  # closing releases the lock


def night_lock(project: Path) -> AbstractContextManager[Path]:
    """For `run`/`dry-run`: a second night for the same project exits with Busy's one line."""
    return project_lock(project, "night", "another night")


def adopt_lock(project: Path) -> AbstractContextManager[Path]:
    return project_lock(project, "adopt", "another adopt")
