"""Per-project locks in `<project>/.skillopt/locks/`: one night at a time, one adoption at a time. An OS file lock
(flock), so a killed holder releases it by dying: no stale lock to clear by hand."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

LOCKS = Path(".skillopt") / "locks"


class Busy(RuntimeError):
    """Another process holds the lock; the message is the one line to print."""


def holder(fd: int) -> str:
    """The pid the holder wrote, read through our own descriptor (the name may have been swapped meanwhile)."""
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        pid = ""
    return f" (pid {pid})" if pid.isdigit() else ""


def _check_plain(fd: int, path: Path) -> None:
    """The lock file is truncated and written: one planted as a second name of a file elsewhere (a hard link to a
    key or a config) or as a FIFO would have that file overwritten, so it is refused in one line."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        kind = "a hard link" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise ValueError(f"{path} is {kind}, not a lock file this tool made; refused: remove it and run again")


@contextmanager
def project_lock(project: Path, name: str, what: str) -> Iterator[Path]:
    """Holds `<project>/.skillopt/locks/<name>.lock` for the block, or raises Busy naming `what` and the holder."""
    folder = project.resolve() / LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise ValueError(
            f"{path} cannot be opened as a lock file ({e.strerror}; a symlink?); remove it and run again"
        ) from None
    try:
        _check_plain(fd, path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Busy(f"{what} is already running for {project}{holder(fd)}; wait for it to finish") from None
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
