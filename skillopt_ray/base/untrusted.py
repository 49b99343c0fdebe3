"""The one reader for files someone else could have planted: a run folder, a staged night, a task folder.

Anyone who can write into such a folder (a cloned repository, a copied run, another local user) can plant a symlink
to `/proc/self/environ`, a FIFO that blocks a reader forever, `/dev/zero`, a 50 MB "history" or a folder of 20,000
folders. So everything read from one goes through here:

- a path is taken relative to its root, never absolute, never with `..`;
- every folder below the root is opened with `O_NOFOLLOW` relative to the one before (`dir_fd`), so no symlink is
  followed at any level, and the file itself is opened `O_NOFOLLOW | O_NONBLOCK` (a FIFO cannot block the open);
- only a regular file is read, and its size is checked before reading (`Untrusted` past the cap); a file with a
  second name (a hard link) is refused too: it can be another folder's file (a key, a user's config) planted here
  under an innocent name, and nothing this project writes has one;
- text that is not UTF-8 and JSON that does not parse (or nests past the parser) are an `Untrusted` error for that
  one file, for the caller to show beside the other items;
- folder listings and walks stop after a number of entries and a time budget.

The root itself is what the user named (it may sit behind a symlink of theirs); nothing below it may.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Generic, Optional, TypeVar, Union

MAX_BYTES = 64 << 20  # a long run's history is a few MB; a file past this is refused unread
MAX_ENTRIES = 5000  # entries one folder listing looks at
WALK_ENTRIES = 20000  # entries one walk looks at, over all its folders
WALK_SECONDS = 2.0

Rel = Union[str, PurePosixPath, Path]
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Untrusted(ValueError):
    """A planted or damaged file refused, with one line naming it and why."""


class Missing(Untrusted):
    """Nothing is there (a file that is not written yet)."""


def parts_of(rel: Rel) -> tuple[str, ...]:
    """The components of a relative path; an absolute path, `..` or an empty one is refused."""
    text = str(rel)
    if not text or "\x00" in text:
        raise Untrusted(f"{text[:80]!r} is not a file name")
    p = PurePosixPath(text)
    if p.is_absolute() or ".." in p.parts:
        raise Untrusted(f"{text[:200]!r}: an absolute path or '..' is refused in a record")
    parts = tuple(x for x in p.parts if x != ".")
    if not parts:
        raise Untrusted(f"{text[:80]!r} names no file")
    return parts


def _open_dir(root: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of the folder `root/parts...`, no symlink followed below the root."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Missing(f"{root} does not exist") from None
    except OSError as e:
        raise Untrusted(f"{root} cannot be opened as a folder ({e.strerror})") from None
    for i, part in enumerate(parts):
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            os.close(fd)
            raise Missing(f"{root.joinpath(*parts[: i + 1])} does not exist") from None
        except OSError as e:
            os.close(fd)
            where = root.joinpath(*parts[: i + 1])
            raise Untrusted(f"{where} is not a plain folder (a symlink or a file: {e.strerror}); refused") from None
        os.close(fd)
        fd = nxt
    return fd


def _open_file(root: Path, rel: Rel) -> tuple[int, os.stat_result, Path]:
    parts = parts_of(rel)
    where = root.joinpath(*parts)
    dfd = _open_dir(root, parts[:-1])
    try:
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        raise Missing(f"{where} does not exist") from None
    except OSError as e:
        raise Untrusted(f"{where} cannot be read as a plain file ({e.strerror}; a symlink?); refused") from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Untrusted(f"{where} is not a regular file (a FIFO, device, socket or folder); refused")
    if st.st_nlink > 1:
        os.close(fd)
        raise Untrusted(f"{where} has {st.st_nlink} names (a hard link to a file elsewhere?); refused: copy it instead")
    return fd, st, where


def read_bytes(root: Path, rel: Rel, limit: int = MAX_BYTES) -> bytes:
    """A regular file's bytes under `root`; Missing when absent, Untrusted when planted or over `limit` bytes."""
    fd, st, where = _open_file(Path(root), rel)
    try:
        if st.st_size > limit:
            raise Untrusted(f"{where} is {st.st_size} bytes, over the {limit}-byte limit for this file; refused")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise Untrusted(f"{where} grew past the {limit}-byte limit while read; refused")
    return b"".join(chunks)


def decode(data: bytes, where: object) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Untrusted(f"{where} is not UTF-8 text (byte {e.start}); refused") from None


def parse_json(text: Union[str, bytes], where: object) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:120]
        raise Untrusted(f"{where} is not valid JSON ({reason})") from None


def read_text(root: Path, rel: Rel, limit: int = MAX_BYTES) -> str:
    return decode(read_bytes(root, rel, limit), Path(root) / str(rel))


def read_json(root: Path, rel: Rel, limit: int = MAX_BYTES) -> Any:
    where = Path(root) / str(rel)
    return parse_json(decode(read_bytes(root, rel, limit), where), where)


def read_json_lines(root: Path, rel: Rel, limit: int = MAX_BYTES) -> list[Any]:
    """The records of a JSON-lines file ([] when it is absent); a line that does not parse (one cut by a kill) is
    skipped, the file itself is refused like any other planted file."""
    try:
        data = read_bytes(root, rel, limit)
    except Missing:
        return []
    out = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except (ValueError, RecursionError):
            continue
    return out


def lstat(root: Path, rel: Rel) -> Optional[os.stat_result]:
    """What is at `root/rel` without following any symlink below the root; None when nothing (or not reachable
    through plain folders)."""
    parts = parts_of(rel)
    try:
        dfd = _open_dir(Path(root), parts[:-1])
    except Untrusted:
        return None
    try:
        return os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(dfd)


def is_file(root: Path, rel: Rel) -> bool:
    st = lstat(root, rel)
    return st is not None and stat.S_ISREG(st.st_mode)


def is_dir(root: Path, rel: Rel) -> bool:
    st = lstat(root, rel)
    return st is not None and stat.S_ISDIR(st.st_mode)


@dataclass(frozen=True)
class Entry:
    """One entry of a folder, as the folder holds it (a symlink is neither a file nor a folder here)."""

    name: str
    is_dir: bool
    is_file: bool
    mtime_ns: int
    size: int
    ino: int


def list_dir(root: Path, rel: Rel = ".", limit: int = MAX_ENTRIES) -> list[Entry]:
    """The entries of a plain folder under `root`, sorted by name, at most `limit` of them ([] when absent)."""
    root = Path(root)
    parts = () if str(rel) in ("", ".") else parts_of(rel)
    try:
        fd = _open_dir(root, parts)
    except Untrusted:
        return []
    out: list[Entry] = []
    try:
        with os.scandir(fd) as it:
            for e in it:
                if len(out) >= limit:
                    break
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                kind = st.st_mode
                out.append(Entry(e.name, stat.S_ISDIR(kind), stat.S_ISREG(kind), st.st_mtime_ns, st.st_size, st.st_ino))
    except OSError:
        pass
    finally:
        os.close(fd)
    return sorted(out, key=lambda x: x.name)


@dataclass
class Walk:
    """A bounded walk's findings, and why it stopped early (empty when it saw everything)."""

    found: list[Path]
    stopped: str = ""


def find_dirs(
    root: Path,
    wanted: Callable[[Path], bool],
    max_depth: int,
    entries: int = WALK_ENTRIES,
    seconds: float = WALK_SECONDS,
) -> Walk:
    """Folders under `root` (itself included) for which `wanted` holds, not descending into them, hidden folders
    and symlinks skipped. Breadth first (shallow finds come before the depths of one huge folder), at most
    MAX_ENTRIES looked at per folder; stops after `entries` entries and folders or `seconds`, saying so."""
    root = Path(root)
    walk = Walk([])
    if not root.is_dir():
        return walk
    deadline, seen = time.monotonic() + seconds, 1
    if wanted(root):
        return Walk([root])
    queue = deque([(root, 0)])
    while queue:
        here, depth = queue.popleft()
        kids, looked = _subfolders(here, min(MAX_ENTRIES, max(entries - seen, 0)))
        seen += looked + 1  # an empty folder costs a listing too
        for kid in kids:  # tested as they are listed: a run two levels down is found before a huge folder's depths
            if wanted(kid):
                walk.found.append(kid)
            elif depth + 1 < max_depth:
                queue.append((kid, depth + 1))
        if seen >= entries or time.monotonic() > deadline:
            walk.stopped = f"stopped looking after {seen} entries under {root}; point it at a smaller folder"
            break
    walk.found.sort()
    return walk


def _subfolders(here: Path, limit: int) -> tuple[list[Path], int]:
    """A folder's plain, not hidden sub-folders (sorted) among its first `limit` entries, and how many it looked at."""
    kids, n = [], 0
    try:
        with os.scandir(here) as it:
            for e in it:
                if n >= limit:
                    break
                n += 1
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False):
                    kids.append(Path(e.path))
    except OSError:
        pass
    return sorted(kids), n


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class StatCache(Generic[K, V]):
    """Values computed from files, kept while the files' stamps (mtime, size) stay the same: a poll of an unchanged
    run costs a few `stat` calls. Bounded: the oldest entry goes first."""

    def __init__(self, size: int = 512):
        self.size = size
        self._items: dict[K, tuple[Hashable, V]] = {}
        self._lock = threading.Lock()  # the dashboard's polls run in worker threads

    def get(self, key: K, stamp: Hashable, compute: Callable[[], V]) -> V:
        with self._lock:
            hit = self._items.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        value = compute()
        with self._lock:
            self._items.pop(key, None)
            self._items[key] = (stamp, value)
            while len(self._items) > self.size:
                self._items.pop(next(iter(self._items)))
        return value


def stamp_of(root: Path, rels: tuple[str, ...] = (".",)) -> tuple[tuple[str, int, int, int], ...]:
    """The (name, mtime, size, inode) of the entries of these folders under `root`: changes when a file in them is
    written or replaced (an atomic rename brings a new inode, whatever the clock's resolution)."""
    out = []
    for rel in rels:
        out += [(f"{rel}/{e.name}", e.mtime_ns, e.size, e.ino) for e in list_dir(root, rel)]
    return tuple(out)
