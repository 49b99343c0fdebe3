"""What a failed write says about its disk: full (ENOSPC, EDQUOT, SQLite's "database or disk is full") or not, in one
line. The run's stores (the response cache, the ledger's journal) and the driver word a full disk the same way."""

from __future__ import annotations

import errno

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FULL_DISK_FIX = "free space, then rerun the same command to resume"
SQLITE_FULL = 13  # sqlite3.Error.sqlite_errorcode of "database or disk is full"
_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "database or disk is full")


def disk_full(err: BaseException) -> bool:
    """True when `err` says the disk (or the user's quota on it) has no room left."""
    if isinstance(err, OSError) and err.errno in FULL_ERRNOS:
        return True
    if getattr(err, "sqlite_errorcode", None) == SQLITE_FULL:
        return True
    return any(w in str(err) for w in _FULL_WORDS)


def error_text(err: BaseException) -> str:
    """`err` in one short line: `[Errno 28] No space left on device`, SQLite's own words, or its last line."""
    if isinstance(err, OSError) and err.errno and err.strerror:
        return f"[Errno {err.errno}] {err.strerror}"
    lines = str(err).strip().splitlines()
    return (lines[-1] if lines else type(err).__name__)[:300]
