"""What each ALFWorld game shows before its first action, kept so an episode can ask the model first and load later.

An episode's first model call needs only the game's opening: the observation and admissible commands its reset
gives. Those are a pure function of the game file and the engine, so once one process has reset a game, the
opening is kept (in memory, and in the compile cache's directory when one is set). An episode that finds its game's
opening sends the first call at once and loads and resets the game while the model answers, instead of before it
asks (a load costs 40-50 ms of CPU with a warm compile cache, and four loads in one actor queue behind each other).
The reset still happens, and its opening is compared with the kept one: should they ever differ, the kept copy is
replaced and the first call is asked again with what the game really showed, so the model never plays on a stale
opening.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from skillopt_envs.alfworld.compile_cache import CompileDiskCache, encode

_MAX_IN_MEMORY = 4096  # a few KB each


@dataclass(frozen=True)
class Opening:
    observation: str
    admissible: tuple[str, ...]


def _engine_version() -> str:
    """The demangler that names the objects is alfworld's: its version is part of every key."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("alfworld")
    except PackageNotFoundError:
        return "?"


def _as_opening(value: object) -> Optional[Opening]:
    """A disk entry back as an opening; None for anything else (a foreign or damaged entry is a miss)."""
    if not (isinstance(value, tuple) and len(value) == 2):
        return None
    observation, admissible = value
    if isinstance(observation, str) and isinstance(admissible, list) and all(isinstance(a, str) for a in admissible):
        return Opening(observation, tuple(admissible))
    return None


@dataclass
class Openings:
    """Game file -> its opening, by the file's content: in memory per process, on disk when a directory is set."""

    directory: Optional[Path] = None  # the compile cache's; opened on first use (a driver that only lists tasks never)
    memory: dict[str, Opening] = field(default_factory=dict)  # content digest -> opening
    _alfworld: str = field(default_factory=_engine_version)
    _disk: Optional[CompileDiskCache] = None
    _opened: bool = False

    @classmethod
    def open(cls, directory: Optional[Path]) -> Openings:
        return cls(directory)

    @property
    def disk(self) -> Optional[CompileDiskCache]:
        if not self._opened:
            self._opened = True
            self._disk = CompileDiskCache.open(self.directory)
        return self._disk

    def _digest(self, gamefile: str) -> Optional[str]:
        try:
            data = Path(gamefile).read_bytes()
        except OSError:
            return None
        return hashlib.sha256(data).hexdigest()

    def get(self, gamefile: str) -> Optional[Opening]:
        digest = self._digest(gamefile)
        if digest is None:
            return None
        hit = self.memory.get(digest)
        if hit is None and self.disk is not None:
            stored = self.disk.get(self.disk.key("opening", self._alfworld, digest))
            kept = _as_opening(stored[1]) if stored is not None else None
            if kept is not None:
                hit = self._remember(digest, kept)
        return hit

    def put(self, gamefile: str, opening: Opening) -> None:
        digest = self._digest(gamefile)
        if digest is None or self.memory.get(digest) == opening:
            return
        self._remember(digest, opening)
        if self.disk is not None:
            # kept as plain strings, so an entry never depends on this module's class path
            entry = (opening.observation, list(opening.admissible))
            self.disk.put(self.disk.key("opening", self._alfworld, digest), encode(entry))

    def _remember(self, digest: str, opening: Opening) -> Opening:
        if len(self.memory) >= _MAX_IN_MEMORY:
            self.memory.pop(next(iter(self.memory)))
        self.memory[digest] = opening
        return opening
