"""A night that trained several skills (the skills the sessions used, each on its own tasks with its own gate) staged
as one night: one folder, one `manifest.json`. The manifest is the single-skill one (staging.py) with one addition:
`skills`, a list of per-skill entries (name, live folder, roots, the gate's verdict, and the `rel` of each of its
rows in `files`), so a night is adopted or undone per skill or all at once (adopt_skills.py). `files` holds every
skill's rows; the top-level fields describe the night as a whole (verified: every changed skill was)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Optional, TypedDict, cast

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.sleep.harvest.redact import Redactor
from skillopt_ray.sleep.proposal import staging
from skillopt_ray.sleep.proposal.staging import ManifestRow, NightProposal, StagedManifest

SKILLS_DIR = "skills"


class _SkillEntryFields(TypedDict):
    """One trained skill of a night: its gate's verdict and which of the manifest's rows are its files."""

    skill_name: str
    live_skill_dir: str
    skill_roots: list[str]
    verified: bool
    verdict: str
    changed: bool
    summary: JSONObject
    files: list[str]  # the `rel` of each of its rows in the manifest's `files`


class SkillEntry(_SkillEntryFields, total=False):
    flags: list[str]  # why its added rules need a person's eyes: adopt then needs --allow-flagged


def entries(m: StagedManifest) -> list[SkillEntry]:
    """The manifest's per-skill entries ([] for a night of one skill)."""
    raw = cast(dict[str, Any], m).get("skills")
    return cast(list[SkillEntry], raw) if isinstance(raw, list) else []


def entry_view(m: StagedManifest, e: SkillEntry) -> StagedManifest:
    """The manifest as if the night had trained this skill alone: its name, folder, roots, verdict and rows."""
    rows = [r for r in m["files"] if r["rel"] in e["files"]]
    view = {k: v for k, v in m.items() if k != "skills"}
    view.update(
        skill_name=e["skill_name"], live_skill_dir=e["live_skill_dir"], skill_roots=e["skill_roots"],
        verified=e["verified"], verdict=e["verdict"], changed=e["changed"], summary=e["summary"], files=rows,
    )  # fmt: skip
    return cast(StagedManifest, view)


def _rows(p: NightProposal, night: Path, include: bool) -> list[ManifestRow]:
    """The skill's files copied under skills/<name>/ and pinned (none when its night changed nothing and a skill is
    live already: there is nothing to adopt)."""
    roots = sorted({os.path.realpath(r) for r in p.skill_roots})
    root = staging.check_target(p.live_skill_dir, roots)
    if not include:
        return []
    rows = []
    for rel in staging.proposal_files(p.proposed_skill_dir):
        data = (p.proposed_skill_dir / rel).read_bytes()
        out = night / SKILLS_DIR / p.skill_name / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        rows.append(staging.live_row("skill", f"{SKILLS_DIR}/{p.skill_name}/{rel}", data, p.live_skill_dir / rel, root))
    return rows


def _adoptable(p: NightProposal) -> bool:
    """A changed skill, or an unchanged one no skill is live for yet (adopting installs the one it started from)."""
    return staging.changed(p.report) or staging.file_pin(p.live_skill_dir / "SKILL.md") == staging.ABSENT


def memory_entry(project: Path, memory: tuple[str, Path], proposals: list[NightProposal], night: Path) -> tuple[
    ManifestRow, SkillEntry
]:  # fmt: skip
    """The memory file's row (staging.memory_row: only the project's own AGENTS.md or CLAUDE.md) and its entry,
    accepted and verified as the changed skills whose blocks it holds."""
    row = staging.memory_row(dataclasses.replace(proposals[0], memory=memory), night)
    changed = [p for p in proposals if staging.changed(p.report)]
    entry: SkillEntry = {
        "skill_name": memory[1].name, "live_skill_dir": os.path.realpath(project),
        "skill_roots": [os.path.realpath(project)], "verified": all(staging.gate_verified(p.report) for p in changed),
        "verdict": "accepted", "changed": True, "summary": {}, "files": [row["rel"]],
        "flags": [str(f) for p in changed for f in p.flags],
    }  # fmt: skip
    return row, entry


def stage_skills(
    project: Path, stamp: str, proposals: list[NightProposal], report_md: str,
    memory: Optional[tuple[str, Path]] = None,
) -> Path:  # fmt: skip
    """All the night's skills in one staged folder; the manifest, written last, lists each (see the module doc)."""
    names = [p.skill_name for p in proposals]
    if not proposals or len(set(names)) != len(names):
        raise ValueError(f"a night stages each skill once; got {names}")
    for p in proposals:
        if not staging._NAME.match(p.skill_name) or p.skill_name.startswith("."):
            raise ValueError(f"skill name {p.skill_name!r} is not a safe folder name")
    final, night = staging.reserve(project, stamp)
    redact = Redactor.from_environment()
    rows: list[ManifestRow] = []
    out: list[SkillEntry] = []
    reports: dict[str, Any] = {}
    evidence = 0
    for p in proposals:
        verified = staging.gate_verified(p.report)
        mine = _rows(p, night, _adoptable(p))
        rows += mine
        report = staging.redact_value(p.report, redact)
        reports[p.skill_name] = report
        if p.evidence_dir is not None:
            evidence += staging.copy_evidence(p.evidence_dir, night / "evidence" / p.skill_name, redact)
        out.append({
            "skill_name": p.skill_name, "live_skill_dir": str(p.live_skill_dir),
            "skill_roots": sorted({os.path.realpath(r) for r in p.skill_roots}), "verified": verified,
            "verdict": str(report.get("verdict") or ("accepted" if verified else "unverified")),
            "changed": staging.changed(report), "summary": staging.summary_of(report), "files": [r["rel"] for r in mine],
            "flags": [str(f) for f in p.flags],
        })  # fmt: skip
    if memory is not None:
        row, entry = memory_entry(project, memory, proposals, night)
        rows.append(row)
        out.append(entry)
    (night / "report.md").write_text(redact(report_md), encoding="utf-8")
    (night / "report.json").write_text(json.dumps({"skills": reports}, indent=1, sort_keys=True, default=str) + "\n")
    manifest = _manifest(project, stamp, out, rows, evidence)
    staging.write_sealed(night / staging.MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    staging.publish(night, final)
    return final


def _manifest(project: Path, stamp: str, out: list[SkillEntry], rows: list[ManifestRow], evidence: int) -> JSONObject:
    changed = [e for e in out if e["changed"]]
    lead = (changed or [e for e in out if e["files"]] or out)[0]
    return {
        "schema": staging.SCHEMA,
        "version": staging.VERSION,
        "stamp": stamp,
        "project": os.path.realpath(project),
        "skill_name": lead["skill_name"],
        "live_skill_dir": lead["live_skill_dir"],
        "skill_roots": sorted({r for e in out for r in e["skill_roots"]}),
        "verified": all(e["verified"] for e in changed) if changed else lead["verified"],
        "verdict": "accepted" if any(e["verdict"] == "accepted" for e in changed) else lead["verdict"],
        "changed": bool(changed),
        "summary": lead["summary"],
        "evidence_files": evidence,
        "files": cast(Any, rows),
        "skills": cast(Any, out),
    }
