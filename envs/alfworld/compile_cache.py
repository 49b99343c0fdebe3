"""On-disk cache of the compiled parts of ALFWorld games, shared by every process on a machine.

Loading a game translates its PDDL problem to SAS (plain, and optimised for replanning, which
`speedups` defers until a replan) and parses its text grammar: 0.2-1.4 CPU-seconds per game
(twice that on stock textworld), nearly all of what an episode costs. These
are pure functions of the game file and ALFWorld's games never change, so each part is computed
once per machine and kept as a zlib-compressed pickle (SAS about 60 KB, 2-3 ms to load; grammar
about 5 KB). Every later load — in another env actor, the next epoch, the next run, every sweep
trial — reads it back.

Entries are keyed by a SHA-256 of the kind, the inputs and the fast-downward/textworld versions;
files are written atomically, and a corrupt or unreadable file is recomputed. Because entries are
pickles, the directory must belong to this user and not be writable by others: otherwise the cache
is refused (with a warning) rather than trusted.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Optional


def default_dir() -> Path:
    if os.environ.get("SKILLOPT_CACHE_DIR"):
        root = Path(os.environ["SKILLOPT_CACHE_DIR"])
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "skillopt_ray"
    return root / "alfworld_compiled_v1"


def resolve_dir(setting: Optional[str]) -> Optional[Path]:
    """`auto` (the default place), `off`/empty (no disk cache), or a directory."""
    if setting is None or str(setting).strip().lower() in ("", "off", "none", "false"):
        return None
    if str(setting).strip().lower() == "auto":
        return default_dir()
    return Path(str(setting)).expanduser()


def encode(value: object) -> bytes:
    """What both the memory and the disk cache hold: a translation shrinks 12x at about 1.5 ms."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def decode(blob: bytes) -> Any:
    return pickle.loads(zlib.decompress(blob))


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"py{sys.version_info.major}.{sys.version_info.minor}"]
    for dist in ("fast-downward-textworld", "textworld"):
        try:
            parts.append(f"{dist}={version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist}=?")
    return ";".join(parts)


class CompileDiskCache:
    """get (decoded) / put (encoded) compiled parts by kind and inputs; counts hits and misses."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.hits = 0
        self.misses = 0
        self._salt = _versions()

    @classmethod
    def open(cls, directory: Optional[Path]) -> Optional[CompileDiskCache]:
        """The cache at `directory`, created private (0700); None (with a warning) if it cannot be
        created or is not safe to load pickles from."""
        if directory is None:
            return None
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = directory.stat()
        except OSError as e:
            warnings.warn(
                f"ALFWorld compile cache disabled: cannot use {directory} ({e}); games load without it", stacklevel=2
            )
            return None
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            warnings.warn(
                f"ALFWorld compile cache disabled: {directory} is not private to this user "
                f"(owner uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}); fix with chmod 700 or set "
                "env.options.compile_cache to another directory",
                stacklevel=2,
            )
            return None
        return cls(directory)

    def key(self, kind: str, *parts: str) -> str:
        h = hashlib.sha256()
        for part in (self._salt, kind, *parts):
            h.update(part.encode("utf-8"))
            h.update(b"\0")
        return f"{kind}-{h.hexdigest()}"

    def get(self, key: str) -> Optional[tuple[bytes, Any]]:
        """The entry as stored and decoded, or None. A torn or foreign file is a miss (and is
        removed), never a wrong game."""
        path = self.directory / f"{key}.pkl.z"
        try:
            blob = path.read_bytes()
            value = decode(blob)
        except FileNotFoundError:
            self.misses += 1
            return None
        except Exception:  # noqa: BLE001 - corrupt entry: drop it and compute again
            self.misses += 1
            try:
                path.unlink()
            except OSError:
                pass
            return None
        self.hits += 1
        return blob, value

    def put(self, key: str, blob: bytes) -> None:
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".pkl.z")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, self.directory / f"{key}.pkl.z")
        except OSError as e:  # a full disk costs speed, not correctness
            warnings.warn(f"ALFWorld compile cache: could not write to {self.directory} ({e})", stacklevel=2)
