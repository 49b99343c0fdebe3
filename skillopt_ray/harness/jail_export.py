"""The host's side of the jail's copy-back: unpack the launcher's archive (skillopt_ray/harness/jail_launcher.py)
into the workspace and home, member by member, each checked to land inside its destination, and say whether it
came whole (its closing note came through and every member it counts arrived)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

NOTE_BYTES = 1 << 16  # the closing note's most (the launcher keeps the path it names to 300 characters)
SPARSE = "SKILLOPT.sparse"  # the pax record of a sparse file: [its full size, [[offset, length], ...] of its data]


@dataclass
class Unpacked:
    """What came back: the launcher's closing note ({} when the archive was cut before it), the members that
    arrived, and why any did not land (the host's own failure, e.g. its disk full)."""

    note: dict[str, Any] = field(default_factory=dict)
    members: int = 0
    problem: str = ""
    too_long: int = 0  # members whose path is longer than the host can name (left out, like the launcher's skips)

    @property
    def whole(self) -> bool:
        return bool(self.note) and not self.problem and self.members == int(self.note.get("members", self.members))


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> bytes:
    f = tar.extractfile(member)
    return f.read(limit) if f is not None else b""


def _target(dests: dict[str, Path], name: str, safe: set[Path]) -> Optional[Path]:
    """Where an archive member goes on the host: under the destination its first component names, never through
    a symlink or out of it; None when it has no such place. `safe`: folders this unpacking made (or checked), whose
    children need no second look (resolving every member's path again made a thousand nested folders take 40 s)."""
    top, _, rel = name.partition("/")
    dest = dests.get(top)
    parts = Path(rel).parts
    if dest is None or not rel or rel.startswith("/") or ".." in parts:
        return None
    target = dest.joinpath(*parts)
    if target.parent not in safe:
        real_dest, real_parent = os.path.realpath(dest), os.path.realpath(target.parent)
        if real_parent != real_dest and not real_parent.startswith(real_dest + os.sep):
            return None
        safe.add(target.parent)
    return None if target.is_symlink() else target


def _ranges(member: tarfile.TarInfo) -> Optional[tuple[int, list[tuple[int, int]]]]:
    """A sparse member's full size and data ranges, checked (in order, apart, inside the file, adding up to the
    member's size); None for an ordinary file. ValueError when the record is malformed."""
    record = member.pax_headers.get(SPARSE)
    if record is None:
        return None
    size, raw = json.loads(record)
    ranges = [(int(a), int(n)) for a, n in raw]
    end = 0
    for a, n in ranges:
        if a < end or n <= 0:
            raise ValueError(f"{member.name}: its data ranges overlap or are empty")
        end = a + n
    if end > int(size) or sum(n for _, n in ranges) != member.size:
        raise ValueError(f"{member.name}: its data ranges do not match its size")
    return int(size), ranges


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, links: dict[str, Path]) -> bool:
    """One folder, regular file (sparse ones with their holes) or hard link (to a file written before) of the
    archive at `target`, never following a symlink there."""
    if member.isdir():
        target.mkdir(exist_ok=True)
        return True
    if member.islnk():
        first = links.get(member.linkname)
        if first is None:
            return False
        try:
            os.link(first, target, follow_symlinks=False)
        except OSError:
            shutil.copyfile(first, target, follow_symlinks=False)
        return True
    if not member.isfile():
        return False
    sparse = _ranges(member)
    src = tar.extractfile(member)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out:
        for at, length in sparse[1] if sparse else [(0, member.size)]:
            out.seek(at)
            while src is not None and length > 0 and (chunk := src.read(min(length, 1 << 20))):
                out.write(chunk)
                length -= len(chunk)
        if sparse:
            out.truncate(sparse[0])
    return True


def unpack_export(path: Path, dests: dict[str, Path]) -> Unpacked:
    """Unpack the launcher's archive into `dests` (archive top folder -> host folder): folders, regular files and
    hard links only, each checked to land inside its destination. A member refused for where it would land is
    counted as arrived (it was sent; the host keeps it out); one the host failed to write is the problem named."""
    got = Unpacked()
    links: dict[str, Path] = {}
    safe: set[Path] = set()
    try:
        with tarfile.open(path, mode="r:") as tar:
            for member in tar:
                if member.name == ".status.json" and member.isfile():
                    got.note = json.loads(_read_member(tar, member, NOTE_BYTES) or b"{}")
                    continue
                got.members += 1
                try:
                    target = _target(dests, member.name, safe)
                    if target is not None and _write_member(tar, member, target, links):
                        if member.isfile():
                            links[member.name] = target
                        elif member.isdir() and not target.is_symlink():
                            safe.add(target)
                except (IsADirectoryError, FileExistsError, NotADirectoryError):
                    continue  # a file where the host holds a folder, or the other way round: the host's stays
                except OSError as e:
                    if e.errno == errno.ENAMETOOLONG:  # a path nested past what the host can name: the agent's own
                        got.too_long += 1
                    else:
                        got.problem = got.problem or f"{member.name[:300]}: {e.strerror or e}"
    except (OSError, tarfile.TarError, ValueError) as e:
        got.problem = got.problem or (f"the archive is cut or malformed ({e})" if got.note else "")
    return got
