"""`adopt [--skill NAME] [--undo]` on a night that trained several skills (staging_skills.py): one skill, or every
pending (or adopted) skill at once, as one transaction of adopt.py's kind (lock, recovery, preflight of every pin,
backups, write-ahead record, files, receipt). Every refusal leaves the live files byte-identical, and an undo
restores exactly the bytes the adoption replaced.

Receipts are numbered files in the night's `receipts/` folder ("001-adopt.json", "002-undo.json", ...), each naming
the skills it moved; a skill's state is read from them in order."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.base import untrusted
from skillopt_ray.sleep.proposal import adopt, staging
from skillopt_ray.sleep.proposal.adopt import Refused, Step
from skillopt_ray.sleep.proposal.lock import adopt_lock
from skillopt_ray.sleep.proposal.staging import ABSENT, StagedManifest, write_atomic
from skillopt_ray.sleep.proposal.staging_skills import SkillEntry, entries, entry_view

RECEIPTS = "receipts"
_RECEIPT = re.compile(r"^[0-9]{3}-[^/]*\.json$")


def receipt_names(night: Path) -> list[str]:
    """The receipts' file names in order, from a bounded listing of the night's own `receipts/` folder (a symlink or
    a planted file among them is read, and refused, like any other)."""
    return [e.name for e in untrusted.list_dir(night, RECEIPTS) if _RECEIPT.match(e.name)]


def receipts(night: Path, problems: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """The night's receipts in order, each sealed by this machine. Adoption passes no `problems` and is refused
    (Refused) by the first one that is not; a reader (`status`, the Nights tab) passes a list, which gets one line per
    unreadable or forged receipt, left out: nothing it says is taken."""
    folder = night / RECEIPTS
    if os.path.lexists(folder) and not untrusted.is_dir(night, RECEIPTS):
        why = f"{folder} is not a plain folder (a symlink or a file); delete it if no adoption of yours wrote it"
        if problems is None:
            raise Refused(why)
        problems.append(why)
    out = []
    for name in receipt_names(night):
        try:
            out.append(adopt.read_json(folder / name))
        except Refused as e:
            if problems is None:
                raise
            problems.append(str(e))
    return out


def skill_states(night: Path, m: StagedManifest, problems: Optional[list[str]] = None) -> dict[str, str]:
    """Each skill's state: adopted, undone, pending, or unchanged (its gate accepted nothing and a skill is live),
    from the sealed receipts (see `receipts` for `problems`)."""
    out = {e["skill_name"]: ("pending" if e["files"] else "unchanged") for e in entries(m)}
    for r in receipts(night, problems):
        names = r.get("skills")
        for name in names if isinstance(names, list) else []:
            if isinstance(name, str) and name in out:
                out[name] = "adopted" if r.get("op") == "adopt" else "undone"
    return out


def is_multi(night: Path) -> bool:
    try:
        return bool(entries(staging.load_manifest(night)))
    except ValueError:
        return False


def find_night(project: Path, stamp: Optional[str], want: str) -> Path:
    """The night named, else the newest night with something to `want` (pending: adopt; adopted: undo), of either
    kind (a single-skill night by adopt.py's own rules). A night's bad receipt is that night's problem: its sealed
    receipts decide whether it is the one meant, and if it is, adoption reads them all and refuses naming the file."""
    if stamp:
        night = staging.staging_root(project) / stamp
        if night not in staging.nights(project):
            raise Refused(f"no staged night {stamp} in {staging.staging_root(project)}; `status` lists them")
        return night
    singles = set(adopt.pending_nights(staging.nights(project))) if want == "pending" else set()
    for night in reversed(staging.nights(project)):
        if is_multi(night):
            if want in skill_states(night, staging.load_manifest(night), []).values():
                return night
        elif night in singles or (want == "adopted" and adopt.is_adopted(night)):
            return night
    return adopt.find_night(project, None, want)  # a single-skill night's own refusal, in its own words


def _chosen(m: StagedManifest, states: dict[str, str], skill: Optional[str], want: str) -> list[SkillEntry]:
    all_e = entries(m)
    if skill is not None:
        match = [e for e in all_e if e["skill_name"] == skill]
        if not match:
            raise Refused(
                f"night {m['stamp']} trained no skill {skill!r}; it trained {[e['skill_name'] for e in all_e]}"
            )
        if states[skill] != want:
            raise Refused(f"skill {skill} of night {m['stamp']} is {states[skill]}, not {want}")
        return match
    out = [e for e in all_e if states[e["skill_name"]] == want]
    if not out:
        raise Refused(f"night {m['stamp']} has no {want} skill; `status` lists them")
    return out


def _next_receipt(night: Path, op: str) -> Path:
    folder = night / RECEIPTS
    folder.mkdir(exist_ok=True)
    n = len(list(folder.glob("[0-9][0-9][0-9]-*.json"))) + 1
    return folder / f"{n:03d}-{op}.json"


def adopt_skills(
    project: Path, stamp: Optional[str], skill: Optional[str], allow_unverified: bool, allow_flagged: bool = False
) -> str:
    """Installs one skill of a night (`skill`) or all its pending ones, as one transaction."""
    with adopt_lock(project):
        notes = [n for n in [adopt.recover(project)] if n]
        night = find_night(project, stamp, "pending")
        m = staging.load_manifest(night)
        chosen = _chosen(m, skill_states(night, m), skill, "pending")
        unverified = [e["skill_name"] for e in chosen if e["changed"] and not e["verified"]]
        if unverified and not allow_unverified:
            raise Refused(f"night {m['stamp']}'s gate for {', '.join(unverified)} was unverified (it judged on "
                          "borrowed tasks); read its report, then pass --allow-unverified to adopt it anyway")  # fmt: skip
        flagged = [f"{e['skill_name']}: {f}" for e in chosen if e["changed"] for f in e.get("flags") or []]
        if flagged and not allow_flagged:
            raise Refused(f"night {m['stamp']}'s proposed rules were flagged ({'; '.join(flagged)[:400]}); read their "
                          "SKILL.md, then pass --allow-flagged to adopt them anyway")  # fmt: skip
        rows = [(e, row, live) for e in chosen for row, live in adopt.preflight(project, night, entry_view(m, e))]
        receipt = _next_receipt(night, "adopt")
        backup = night / "backup" / receipt.stem
        if backup.exists():
            shutil.rmtree(backup)
        steps, names = [], []
        for i, (e, row, live) in enumerate(rows):
            copy = None
            if row["live_sha256"] != ABSENT:
                copy = backup / str(i)
                copy.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(copy, live.read_bytes())
            steps.append(Step(str(live), row["live_sha256"], str(copy) if copy else None, row["sha256"],
                              str(night / row["rel"])))  # fmt: skip
            names.append(e["skill_name"])
        skills = [e["skill_name"] for e in chosen]
        record = {"op": "adopt", "stamp": m["stamp"], "skills": skills, "steps": [s.as_dict() for s in steps],
                  "step_skills": names}  # fmt: skip
        adopt.run_steps(project, "adopt", m["stamp"], receipt, steps, record)
        said = f"adopted {', '.join(skills)} of night {m['stamp']}: {len(steps)} file(s) written"
        return "\n".join(notes + [said])


def undo_skills(project: Path, stamp: Optional[str], skill: Optional[str]) -> str:
    """Restores what the adoption of one skill (or of every adopted skill of the night) replaced."""
    with adopt_lock(project):
        notes = [n for n in [adopt.recover(project)] if n]
        night = find_night(project, stamp, "adopted")
        m = staging.load_manifest(night)
        chosen = {e["skill_name"] for e in _chosen(m, skill_states(night, m), skill, "adopted")}
        done: list[Step] = []
        for r in receipts(night):  # each chosen skill's latest adoption (a skill is adopted once: pending -> adopted)
            if r.get("op") == "adopt":
                done += [Step(**s) for s, n in zip(r["steps"], r["step_skills"]) if n in chosen]
        views = [entry_view(m, e) for e in entries(m) if e["skill_name"] in chosen]
        rows = {r["live_path"]: (r, v) for v in views for r in v["files"]}
        for s in done:
            if s.live not in rows:
                raise Refused(
                    f"{s.live} is in night {m['stamp']}'s receipt but not its manifest (edited); undo refused"
                )
            row, view = rows[s.live]
            adopt.check_path(row, list(view["skill_roots"]))
            adopt.check_still_adopted(s, m["stamp"])
        steps = adopt.reversed_steps(done)
        record = {"op": "undo", "stamp": m["stamp"], "skills": sorted(chosen), "steps": [s.as_dict() for s in steps]}
        adopt.run_steps(project, "undo", m["stamp"], _next_receipt(night, "undo"), steps, record)
        adopt.drop_created_folders(steps)
        return "\n".join(
            notes + [f"undid {', '.join(sorted(chosen))} of night {m['stamp']}: {len(steps)} file(s) restored"]
        )


def dispatch(
    project: Path,
    stamp: Optional[str],
    skill: Optional[str],
    undo: bool,
    allow_unverified: bool,
    allow_flagged: bool = False,
) -> str:
    """`adopt` for either kind of night: a several-skill night here, a single-skill one by adopt.py (`--skill` then
    has to name its skill)."""
    want = "adopted" if undo else "pending"
    night = find_night(project, stamp, want)
    m = staging.load_manifest(night)  # an unsealed night is refused here, before the lock file: nothing is written
    if entries(m):
        if undo:
            return undo_skills(project, night.name, skill)
        return adopt_skills(project, night.name, skill, allow_unverified, allow_flagged)
    if skill is not None and m["skill_name"] != skill:
        raise Refused(f"night {night.name} trained only {m['skill_name']!r}, not {skill!r}")
    if undo:
        return adopt.undo(project, night.name)
    return adopt.adopt(project, night.name, allow_unverified, allow_flagged)
