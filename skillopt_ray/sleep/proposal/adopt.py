"""`adopt`: a staged night's skill installed as a transaction, and `adopt --undo`. Every refusal leaves the live files
byte-identical. Order: lock, recover an interrupted transaction, preflight every pin, back up the live files, write
the write-ahead record, write the files, write the receipt, drop the record. A kill anywhere is rolled back by the
next adopt (or refused, naming the file, when something else changed it meanwhile); a skill is never half written."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.base import untrusted
from skillopt_ray.sleep.proposal import seal, staging
from skillopt_ray.sleep.proposal.lock import adopt_lock
from skillopt_ray.sleep.proposal.staging import (
    ABSENT,
    ManifestRow,
    StagedManifest,
    file_pin,
    write_atomic,
    write_sealed,
)

WAL = "adopt-transaction.json"
ADOPTED = "adopted.json"
UNDONE = "undone.json"


class Refused(ValueError):
    """Adoption refused; the message is the one line to print (exit 2)."""


@dataclass(frozen=True)
class Step:
    """One file of a transaction: from the `before` bytes (a copy kept in `before_copy`, or absent) to `after`."""

    live: str
    before: str  # sha256 or "absent"
    before_copy: Optional[str]
    after: str
    after_copy: Optional[str]

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def wal_path(project: Path) -> Path:
    return staging.staging_root(project) / WAL


def read_json(path: Path) -> dict[str, Any]:
    """A transaction record or receipt adoption wrote: sealed by this machine (a planted or edited one is refused,
    so it can never name where adoption writes) and a JSON object."""
    try:
        data = json.loads(seal.read_sealed(path.parent, path.name))
    except (ValueError, RecursionError) as e:  # Unsealed is a ValueError
        raise Refused(f"{str(e).splitlines()[0]}; delete {path} if no adoption of yours was interrupted") from None
    if not isinstance(data, dict):
        raise Refused(f"{path} is not a JSON object; it was edited by hand")
    return data


def drop(path: Path) -> None:
    """A transaction record goes with its seal (so the exact bytes cannot be planted back later)."""
    path.unlink()
    seal.seal_path(path).unlink(missing_ok=True)


def copy_bytes(project: Path, copy: str) -> bytes:
    """A staged or backed-up copy's bytes: only from under the project's staging folder, no symlink followed there."""
    root = str(staging.staging_root(project))
    if not staging.within(copy, root) or copy == root:
        raise Refused(f"{copy} is not under {root}; a transaction names only staged copies; refused")
    try:
        return untrusted.read_bytes(Path(root), os.path.relpath(copy, root))
    except untrusted.Untrusted as e:
        raise Refused(f"{e}; stage the night again") from None


def put(project: Path, step_live: str, copy: Optional[str]) -> None:
    """The live file becomes the copy's bytes, or goes away when the copy is None."""
    live = Path(step_live)
    if copy is None:
        if os.path.lexists(live):
            live.unlink()
        return
    live.parent.mkdir(parents=True, exist_ok=True)
    mode = live.stat().st_mode & 0o777 if live.is_file() and not live.is_symlink() else 0o644
    write_atomic(live, copy_bytes(project, copy), mode)  # an executable helper script stays executable


def recover(project: Path) -> Optional[str]:
    """An interrupted transaction is rolled back (every file to its `before` bytes) unless its receipt was written,
    when it finished and only its record is left. A file matching neither side is refused, the record kept."""
    path = wal_path(project)
    if not os.path.lexists(path):
        return None
    wal = read_json(path)
    receipt = Path(wal["receipt"])
    if receipt.exists():
        drop(path)
        return f"finished the interrupted {wal['op']} of night {wal['stamp']} (its receipt was written)"
    steps = [Step(**s) for s in wal["steps"]]
    for s in steps:
        now = file_pin(Path(s.live))
        if now not in (s.before, s.after):
            raise Refused(
                f"an interrupted {wal['op']} of night {wal['stamp']} left {s.live} changed by something else; "
                f"compare it with {s.before_copy or 'nothing (it did not exist)'}, then delete {path}"
            )
    for s in steps:
        if file_pin(Path(s.live)) != s.before:
            put(project, s.live, s.before_copy)
    drop(path)
    return f"rolled back the interrupted {wal['op']} of night {wal['stamp']}; the live files are as before it"


def run_steps(project: Path, op: str, stamp: str, receipt: Path, steps: list[Step], record: dict[str, Any]) -> None:
    """The write-ahead record first, then the files, then the receipt, then the record goes."""
    wal = {"op": op, "stamp": stamp, "receipt": str(receipt), "steps": [s.as_dict() for s in steps]}
    write_sealed(wal_path(project), json.dumps(wal, indent=1).encode())
    for s in steps:
        put(project, s.live, s.after_copy)
    write_sealed(receipt, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    drop(wal_path(project))


def find_night(project: Path, stamp: Optional[str], want: str) -> Path:
    """The night named, else the newest pending one (`adopt`) or the newest adopted one (`undo`)."""
    all_nights = staging.nights(project)
    if stamp:
        night = staging.staging_root(project) / stamp
        if night not in all_nights:
            raise Refused(f"no staged night {stamp} in {staging.staging_root(project)}; `status` lists them")
        return night
    if want == "pending":
        cands = pending_nights(all_nights)
        if not cands and all_nights and not os.path.lexists(all_nights[-1] / ADOPTED):
            raise Refused(nothing_to_adopt(all_nights[-1].name))
    else:
        cands = [n for n in all_nights if is_adopted(n)]
    if not cands:
        raise Refused(f"no {want} night in {staging.staging_root(project)}; `status` lists them")
    return cands[-1]


def is_adopted(night: Path) -> bool:
    """A one-skill night an undo without --night may mean: adopted by a receipt this machine sealed, not undone. A
    night whose receipt is planted or damaged is neither adopted nor pending (as `status` says): it is passed over
    here, and an adopt or undo naming it reads the receipt and refuses, naming the file."""
    if os.path.lexists(night / UNDONE) or not os.path.lexists(night / ADOPTED):
        return False
    try:
        read_json(night / ADOPTED)
    except Refused:
        return False
    return True


def pending_nights(all_nights: list[Path]) -> list[Path]:
    """Nights not adopted whose gate accepted a change, or that would install a first skill (a night that changed
    nothing where a skill is live already is never pending)."""
    out = []
    for n in all_nights:
        if os.path.lexists(n / ADOPTED):  # adopted, or a receipt that cannot be trusted: not pending either way
            continue
        try:
            m = staging.load_manifest(n)
            if staging.unchanged(m) and not staging.first_install(m):
                continue
        except ValueError:
            pass  # an unreadable manifest: `adopt` names the problem when it gets there
        out.append(n)
    return out


def nothing_to_adopt(stamp: str) -> str:
    return f"nothing to adopt: night {stamp} changed nothing"


def check_path(row: ManifestRow, roots: list[str]) -> Path:
    """The live path as pinned: absolute, no `..`, resolving to the same real path inside its recorded root."""
    live = Path(row["live_path"])
    if not live.is_absolute() or ".." in live.parts:
        raise Refused(f"{live} is not an absolute path without '..'; the manifest was edited")
    if row["root"] not in roots:
        raise Refused(f"{live}'s root {row['root']} is not among the recorded skill roots; the manifest was edited")
    real = os.path.realpath(live)
    if not staging.within(real, row["root"]) or real == row["root"]:
        raise Refused(f"{live} resolves to {real}, outside the skill root {row['root']} (a symlink or '..'); refused")
    if real != row["live_realpath"]:
        raise Refused(f"{live} now resolves to {real}, not {row['live_realpath']} as staged (a symlink moved)")
    if os.path.lexists(live) and (live.is_symlink() or not live.is_file()):
        raise Refused(f"{live} is not a plain file any more; refused")
    return live


def check_derived(row: ManifestRow, m: StagedManifest) -> None:
    """The live path is the one its row's place derives: a skill file is the skill folder joined with the file's path
    inside the proposal (`skill/notes.md` -> `<live skill folder>/notes.md`), a memory file the project's own
    AGENTS.md or CLAUDE.md. A manifest cannot aim one row at another file inside the same root."""
    live = row["live_path"]
    if row["kind"] == "memory":
        ok = os.path.realpath(os.path.dirname(live)) == m["project"] and os.path.basename(live) in staging.MEMORY_NAMES
    else:
        inside = os.path.relpath(live, m["live_skill_dir"])
        ok = not inside.startswith("..") and row["rel"].endswith("/" + inside) and row["kind"] == "skill"
    if not ok:
        raise Refused(f"{live} is not where row {row['rel']} installs (under {m['live_skill_dir']}); refused")


def preflight(project: Path, night: Path, m: StagedManifest) -> list[tuple[ManifestRow, Path]]:
    if m["project"] != os.path.realpath(project):
        raise Refused(f"night {m['stamp']} was staged for {m['project']}, not this project; refused")
    roots = list(m["skill_roots"]) + [m["project"]]
    out = []
    for row in m["files"]:
        root_real = os.path.realpath(row["root"])
        if root_real != row["root"]:
            raise Refused(f"the skill root {row['root']} now resolves to {root_real}; refused")
        live = check_path(row, roots if row["kind"] == "memory" else list(m["skill_roots"]))
        check_derived(row, m)
        proposed = night / row["rel"]
        if staging.sha256_bytes(copy_bytes(project, str(proposed))) != row["sha256"]:
            raise Refused(f"{proposed} changed since staging (its sha256 is not the manifest's); stage again")
        if file_pin(live) != row["live_sha256"]:
            was = "absent" if row["live_sha256"] == ABSENT else "as staged"
            raise Refused(f"{live} changed since night {m['stamp']} was staged (it was {was}); stage a new night")
        out.append((row, live))
    return out


def adopt(
    project: Path, stamp: Optional[str] = None, allow_unverified: bool = False, allow_flagged: bool = False
) -> str:
    """Installs a staged night; returns the line to print, raises Refused with one line."""
    with adopt_lock(project):
        notes = [n for n in [recover(project)] if n]
        night = find_night(project, stamp, "pending")
        m = staging.load_manifest(night)
        if os.path.lexists(night / ADOPTED):
            read_json(night / ADOPTED)  # a planted or damaged receipt is refused, naming it
            raise Refused(f"night {m['stamp']} was already adopted; `adopt --undo --night {m['stamp']}` reverts it")
        first = staging.first_install(m)  # changed nothing, but no skill is live yet: install the starting one
        if staging.unchanged(m) and not first:
            raise Refused(nothing_to_adopt(m["stamp"]))
        if not m["verified"] and not allow_unverified and not first:
            raise Refused(
                f"night {m['stamp']}'s gate was unverified (it judged on borrowed tasks); read its report, then "
                "pass --allow-unverified to adopt it anyway"
            )
        flags = m.get("flags") or []
        if flags and not allow_flagged:
            raise Refused(
                f"night {m['stamp']}'s proposed rules were flagged ({'; '.join(map(str, flags))[:400]}); read its "
                "SKILL.md, then pass --allow-flagged to adopt it anyway"
            )
        rows = preflight(project, night, m)
        backup = night / "backup"
        if backup.exists():
            shutil.rmtree(backup)  # left by a rolled-back attempt: the live files are as staged (checked above)
        steps = []
        for i, (row, live) in enumerate(rows):
            copy = None
            if row["live_sha256"] != ABSENT:
                copy = backup / str(i)
                copy.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(copy, live.read_bytes())
            steps.append(
                Step(str(live), row["live_sha256"], str(copy) if copy else None, row["sha256"], str(night / row["rel"]))
            )
        record = {"stamp": m["stamp"], "steps": [s.as_dict() for s in steps]}
        run_steps(project, "adopt", m["stamp"], night / ADOPTED, steps, record)
        where = m["live_skill_dir"]
        said = f"adopted night {m['stamp']}: {len(steps)} file(s) written under {where}"
        if first:
            said += " (its gate accepted no edit: this installs the skill it started from, for later nights to improve)"
        return "\n".join(notes + [said])


def undo(project: Path, stamp: Optional[str] = None) -> str:
    """Restores what a night's adoption replaced; refuses when a file changed since the adoption."""
    with adopt_lock(project):
        notes = [n for n in [recover(project)] if n]
        night = find_night(project, stamp, "adopted")
        m = staging.load_manifest(night)
        if not os.path.lexists(night / ADOPTED):
            raise Refused(f"night {m['stamp']} was never adopted; nothing to undo")
        if os.path.lexists(night / UNDONE):
            read_json(night / UNDONE)
            raise Refused(f"night {m['stamp']}'s adoption was already undone")
        done = [Step(**s) for s in read_json(night / ADOPTED)["steps"]]
        roots = list(m["skill_roots"]) + [m["project"]]
        for s, row in zip(done, m["files"]):
            check_path(row, roots if row["kind"] == "memory" else list(m["skill_roots"]))
            check_still_adopted(s, m["stamp"])
        steps = reversed_steps(done)
        run_steps(project, "undo", m["stamp"], night / UNDONE, steps, {"stamp": m["stamp"]})
        drop_created_folders(steps)
        return "\n".join(notes + [f"undid night {m['stamp']}: {len(steps)} file(s) restored"])


def check_still_adopted(s: Step, stamp: str) -> None:
    """Undo restores a file only while it still holds what adoption wrote, from a backup that still matches its pin."""
    if file_pin(Path(s.live)) != s.after:
        raise Refused(f"{s.live} changed since night {stamp} was adopted; undo refused, nothing touched")
    if s.before_copy and file_pin(Path(s.before_copy)) != s.before:
        raise Refused(f"the backup {s.before_copy} does not match its pin; undo refused, nothing touched")


def reversed_steps(done: list[Step]) -> list[Step]:
    """The steps that put back what the adoption's steps replaced."""
    return [Step(s.live, s.after, s.after_copy, s.before, s.before_copy) for s in done]


def drop_created_folders(steps: list[Step]) -> None:
    """After an undo: the skill folders adoption created (their file was absent before), when now empty."""
    for s in steps:
        if s.after == ABSENT:
            try:
                Path(s.live).parent.rmdir()
            except OSError:
                pass


def auto_adopt(project: Path, stamp: str) -> str:
    """For `run --auto-adopt` only: adopts the night just staged, never one whose gate was unverified."""
    m = staging.load_manifest(staging.staging_root(project) / stamp)
    if not m["verified"]:
        raise Refused(f"night {stamp} is unverified; auto-adopt never installs it (read its report, then `adopt`)")
    return adopt(project, stamp, allow_unverified=False)
