"""The agent CLI's program as the jail runs it: an exec-only copy, so that the running CLI is not dumpable.

The kernel lets a process open another's /proc/<pid>/mem (read and write), environ, maps, fd/ and cwd, and take
its descriptors (pidfd_getfd), when both run as the same uid, unless the target is not dumpable. The commands the
agent runs are the CLI's own children, of its uid; and an exec makes a process dumpable again (PR_SET_DUMPABLE set
before it does not last), unless the program it runs is one it may execute but not read: the kernel then keeps it
not dumpable for its whole life. So the jail mounts, over the CLI's executable, a copy of it with mode 0111.

The copy lives in the caller's cache (made once per version of the file, the older ones removed), owned by the
caller. Started as root, the jail's fresh uid is "other" to it and may only execute it; started as another user,
bubblewrap maps the caller to the jail's uid, the copy's owner, and mounts it read-only, so no command can make it
readable again (chmod on a read-only mount fails). Only a compiled executable is copied: for a script the program
the kernel runs is its interpreter, which stays as it is (see docs/harnesses.md)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Optional

EXEC_ONLY = 0o111


class ExecOnlyError(RuntimeError):
    """The exec-only copy could not be made: the CLI is not started (it would run dumpable)."""


def cache_root() -> Path:
    """Where the exec-only copies are kept: $XDG_CACHE_HOME/skillopt/exec-only (by default ~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "skillopt" / "exec-only"


def is_compiled(path: Path) -> bool:
    """Whether `path` is an ELF executable (a script's first bytes are `#!`)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _usable(copy: Path, size: int) -> bool:
    """An exec-only copy this caller made: a regular file of its own, mode 0111, of the source's size."""
    try:
        st = os.lstat(copy)
    except OSError:
        return False
    own = st.st_uid == os.geteuid() and stat.S_ISREG(st.st_mode)
    return own and stat.S_IMODE(st.st_mode) == EXEC_ONLY and st.st_size == size


def exec_only_copy(exe: Path) -> Path:
    """The cached exec-only copy of the compiled executable `exe` (symlinks followed), made if missing. Raises
    ExecOnlyError naming the folder when it cannot be made there."""
    real = exe.resolve()
    st = real.stat()
    where = cache_root() / hashlib.sha256(str(real).encode()).hexdigest()[:16]
    version = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    copy = where / f"{hashlib.sha256(version.encode()).hexdigest()[:16]}-{real.name}"
    if _usable(copy, st.st_size):
        return copy
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.statvfs(where).f_flag & os.ST_NOEXEC:
            raise OSError(f"{where} is on a filesystem mounted noexec")
        part = where / f".part-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            shutil.copyfile(real, part)
            os.chmod(part, EXEC_ONLY)
            os.replace(part, copy)
        finally:
            part.unlink(missing_ok=True)
    except OSError as e:
        raise ExecOnlyError(
            f"cannot make the agent CLI's exec-only copy in {where} ({e}); the jail needs one to keep the CLI's "
            "memory out of its commands' reach: free some space there or set XDG_CACHE_HOME to a writable folder"
        ) from None
    _drop_older(where, copy)
    return copy


def _drop_older(where: Path, keep: Path) -> None:
    """Remove the copies of earlier versions of the same file (a jail already running keeps its own mounted)."""
    for old in where.iterdir():
        if old != keep and not old.name.startswith(".part-"):
            old.unlink(missing_ok=True)


def cli_mount(prefix: Path, jail_prefix: str, cli: str) -> Optional[tuple[str, str]]:
    """(host copy, path in the jail) to mount over the CLI's executable, when `cli` (its path as the jail sees
    it) is a compiled program under the npm prefix; None otherwise (a script, or a program outside the prefix)."""
    if not cli.startswith(jail_prefix + "/"):
        return None
    host = prefix / cli[len(jail_prefix) + 1 :]
    real, top = host.resolve(), prefix.resolve()
    if not real.is_relative_to(top) or not real.is_file() or not is_compiled(real):
        return None
    return str(exec_only_copy(real)), f"{jail_prefix}/{real.relative_to(top)}"
