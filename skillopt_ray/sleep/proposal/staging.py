"""A night's proposal written to `<project>/.skillopt/staging/<UTC stamp>/` for the user to read and adopt: the proposed
skill folder, the report, the redacted evidence and, written last, `manifest.json` pinning every byte adoption may
touch (the proposal's sha256, the live file's sha256 or "absent", its real path, the skill roots it must stay in)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, TypedDict, cast

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base import untrusted
from skillopt_ray.sleep.harvest.redact import Redactor
from skillopt_ray.sleep.proposal import seal

SCHEMA = "skillopt-ray-staging"
VERSION = 1
STAGING = Path(".skillopt") / "staging"
MANIFEST = "manifest.json"
ABSENT = "absent"
MEMORY_NAMES = ("AGENTS.md", "CLAUDE.md")
_STAMP = re.compile(r"^\d{8}T\d{6}Z$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class NightProposal:
    """What a night hands to staging.

    `report` must hold `verified` (bool: False when the gate judged on borrowed or overlapping tasks; adoption then
    needs an explicit flag) or, failing that, `verdict` (accepted | rejected | unverified: only "accepted" counts as
    verified); it may hold `scores` ({"before": x, "after": y}) and `interval` ({"mean_diff", "lo", "hi"}) or
    `gates` (rows with those keys), shown by `status`. `memory` is the whole proposed text of AGENTS.md/CLAUDE.md
    (only its marked block differs) and the live file's path."""

    project: Path
    stamp: str  # UTC, e.g. 20261128T041500Z
    skill_name: str
    proposed_skill_dir: Path  # a folder holding SKILL.md, maybe more files
    live_skill_dir: Path  # where it would be installed
    skill_roots: list[Path]  # the roots adoption may write under
    report_md: str
    report: dict[str, Any]
    evidence_dir: Optional[Path] = None
    memory: Optional[tuple[str, Path]] = None
    flags: list[str] = field(default_factory=list)  # why its added rules need a person's eyes (guard.screen_rules)


class ManifestRow(TypedDict):
    """One file of a staged night, pinned: its proposed bytes (`rel` under the night, `sha256`) and the live file
    it would replace (path, real path and sha256 at staging time, or "absent"), under its skill `root`."""

    kind: str  # skill | memory
    rel: str
    sha256: str
    live_path: str
    live_realpath: str
    live_sha256: str
    root: str


class _ManifestFields(TypedDict):
    """A staged night's manifest.json: what the night proposes, the gate's verdict, and every file pinned."""

    schema: str
    version: int
    stamp: str
    project: str
    skill_name: str
    live_skill_dir: str
    skill_roots: list[str]
    verified: bool
    verdict: str
    summary: JSONObject
    evidence_files: int
    files: list[ManifestRow]


class StagedManifest(_ManifestFields, total=False):
    changed: bool  # whether the gate accepted a change (absent in manifests staged before the field existed)
    flags: list[str]  # why its added rules need a person's eyes: adopt then needs --allow-flagged


def staging_root(project: Path) -> Path:
    return project.resolve() / STAGING


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MAX_PIN_BYTES = 64 << 20  # a skill file is a few KiB; a live "file" larger than this is not one to pin


def file_pin(path: Path) -> str:
    """The sha256 of a regular file's bytes, or "absent" when nothing is there. Opened without following a symlink
    and without blocking (a FIFO put where a skill was is refused, never waited on); size-capped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return ABSENT
    except OSError as e:
        raise ValueError(
            f"{path} is not a regular file ({e.strerror}: a symlink?); move it away and stage again"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file (a folder, FIFO or device); move it away and stage again")
        if st.st_size > MAX_PIN_BYTES:
            raise ValueError(f"{path} is {st.st_size} bytes, too large for a skill file; move it away")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as f:
            return sha256_bytes(f.read(MAX_PIN_BYTES + 1))
    finally:
        os.close(fd)


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """A temporary file in the same folder, flushed to disk, renamed over `path`: a kill leaves old or new bytes."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_sealed(path: Path, data: bytes, mode: int = 0o644) -> None:
    """`write_atomic` with this machine's seal beside it (the seal first: a kill between leaves a file whose seal
    does not match, which is refused, never trusted)."""
    write_atomic(seal.seal_path(path), seal.seal_bytes(path, data), mode)
    write_atomic(path, data, mode)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def proposal_files(folder: Path) -> list[str]:
    """The proposal's files as relative paths; symlinks and odd names are refused (adoption writes only plain files)."""
    if not (folder / "SKILL.md").is_file():
        raise ValueError(f"{folder} holds no SKILL.md; a proposed skill is a folder with SKILL.md")
    out = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_symlink():
            raise ValueError(f"{p} is a symlink; a proposed skill holds plain files only")
        if any(not _NAME.match(part) for part in rel.parts):
            raise ValueError(f"{rel} is not a safe file name for a skill (letters, digits, . _ -)")
        if p.is_file():
            out.append(rel.as_posix())
    return out


def check_target(live: Path, roots: list[str]) -> str:
    """The root (a real path) the live path sits in; a `..`, a relative path or a symlink leading out is refused."""
    if not live.is_absolute() or ".." in live.parts:
        raise ValueError(f"{live} must be an absolute path without '..'")
    real = os.path.realpath(live)
    for root in roots:
        if within(real, root) and real != root:
            return root
    raise ValueError(f"{live} resolves to {real}, outside the skill roots {roots}; install under one of them")


def redact_value(value: Any, redact: Redactor) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_value(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, redact) for v in value]
    return value


def copy_evidence(src: Path, dst: Path, redact: Redactor) -> int:
    """Text files copied through the redactor (prompts and replies as the run directory keeps them); others skipped."""
    n = 0
    for p in sorted(src.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out = dst / p.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(redact(text), encoding="utf-8")
        n += 1
    return n


def live_row(kind: str, rel: str, proposed: bytes, live: Path, root: str) -> ManifestRow:
    return {
        "kind": kind,
        "rel": rel,
        "sha256": sha256_bytes(proposed),
        "live_path": str(live),
        "live_realpath": os.path.realpath(live),
        "live_sha256": file_pin(live),
        "root": root,
    }


def skill_rows(p: NightProposal, night: Path, roots: list[str]) -> list[ManifestRow]:
    root = check_target(p.live_skill_dir, roots)
    rows = []
    for rel in proposal_files(p.proposed_skill_dir):
        data = (p.proposed_skill_dir / rel).read_bytes()
        out = night / "skill" / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        rows.append(live_row("skill", f"skill/{rel}", data, p.live_skill_dir / rel, root))
    return rows


def memory_row(p: NightProposal, night: Path) -> ManifestRow:
    """The memory file may only be the project's own AGENTS.md or CLAUDE.md (its root is the project)."""
    assert p.memory is not None
    text, live = p.memory
    if live.name not in MEMORY_NAMES:
        raise ValueError(f"memory file {live} must be one of {', '.join(MEMORY_NAMES)}")
    project = os.path.realpath(p.project)
    root = check_target(live, [project])
    if os.path.dirname(os.path.realpath(live)) != project:
        raise ValueError(f"memory file {live} must sit at the project's top ({project})")
    data = text.encode("utf-8")
    (night / "memory").mkdir()
    (night / "memory" / live.name).write_bytes(data)
    return live_row("memory", f"memory/{live.name}", data, live, root)


def reserve(project: Path, stamp: str) -> tuple[Path, Path]:
    """(the night's final folder, the hidden scratch folder it is written in): the night appears under its stamp only
    by one rename once whole, so a kill while staging leaves no night folder, never a half-made one. A scratch
    folder a killed staging left for this stamp is dropped."""
    if not _STAMP.match(stamp):
        raise ValueError(f"night stamp {stamp!r} is not a UTC stamp like 20261128T041500Z")
    root = staging_root(project)
    root.mkdir(parents=True, exist_ok=True)
    if root.is_symlink() or os.path.realpath(root) != str(root):
        raise ValueError(f"{root} resolves elsewhere (a symlink); remove it and stage again")
    night = root / stamp
    if os.path.lexists(night):
        raise ValueError(f"a night stamped {stamp} is already staged in {root}; use a new stamp")
    scratch = root / f".{stamp}.partial"
    if scratch.is_dir() and not scratch.is_symlink():
        shutil.rmtree(scratch)
    elif os.path.lexists(scratch):
        scratch.unlink()
    scratch.mkdir(mode=0o700)  # the evidence is redacted, yet still your prompts: private to you
    return night, scratch


def publish(scratch: Path, night: Path) -> None:
    """The whole night under its stamp in one rename (refused if a night took the stamp meanwhile)."""
    if os.path.lexists(night):
        shutil.rmtree(scratch)
        raise ValueError(f"a night stamped {night.name} is already staged in {night.parent}; use a new stamp")
    os.rename(scratch, night)
    fsync_dir(night.parent)


def stage_night(p: NightProposal) -> Path:
    """Writes the night's folder in a hidden scratch folder, `manifest.json` last, then renames it to its stamp: a kill
    at any point leaves no night folder or a whole one (`status` and `adopt` also skip a folder without a manifest)."""
    if not _NAME.match(p.skill_name) or p.skill_name.startswith("."):
        raise ValueError(f"skill name {p.skill_name!r} is not a safe folder name")
    verified = gate_verified(p.report)
    roots = sorted({os.path.realpath(r) for r in p.skill_roots})
    if not roots:
        raise ValueError("no skill roots given; staging needs the folders adoption may write under")
    check_target(p.live_skill_dir, roots)
    final, night = reserve(p.project, p.stamp)
    try:
        write_night(p, night, roots, verified)
        publish(night, final)
    except BaseException:  # a full disk, a kill: no scratch folder left behind (the night stays resumable)
        shutil.rmtree(night, ignore_errors=True)
        raise
    return final


def write_night(p: NightProposal, night: Path, roots: list[str], verified: bool) -> None:
    """The night's files in its scratch folder, manifest.json last."""
    redact = Redactor.from_environment()
    rows = skill_rows(p, night, roots)
    if p.memory is not None:
        rows.append(memory_row(p, night))
    report = redact_value(p.report, redact)
    (night / "report.md").write_text(redact(p.report_md), encoding="utf-8")
    (night / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True, default=str) + "\n")
    evidence = copy_evidence(p.evidence_dir, night / "evidence", redact) if p.evidence_dir else 0
    manifest: StagedManifest = {
        "schema": SCHEMA,
        "version": VERSION,
        "stamp": p.stamp,
        "project": os.path.realpath(p.project),
        "skill_name": p.skill_name,
        "live_skill_dir": str(p.live_skill_dir),
        "skill_roots": roots,
        "verified": verified,
        "verdict": str(report.get("verdict") or ("accepted" if verified else "unverified")),
        "changed": changed(report),
        "summary": summary_of(report),
        "evidence_files": evidence,
        "files": rows,
        "flags": [str(f) for f in p.flags],
    }
    write_sealed(night / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())


def gate_verified(report: dict[str, Any]) -> bool:
    """`verified` as given; without it, only a verdict of "accepted" counts (anything else is unverified)."""
    v = report.get("verified")
    if isinstance(v, bool):
        return v
    if v is None and isinstance(report.get("verdict"), str):
        return report["verdict"] == "accepted"
    raise ValueError("the night's report lacks `verified` (true or false); staging needs the gate's verdict")


def changed(report: dict[str, Any]) -> bool:
    """Whether the night's gate accepted a candidate: a night that changed nothing is staged for its report only."""
    return bool(report.get("changed", True))


def unchanged(manifest: StagedManifest) -> bool:
    """A staged night that changed nothing (manifests from before the field count as changed)."""
    return manifest.get("changed") is False


def first_install(manifest: StagedManifest) -> bool:
    """A night that changed nothing, staged where no skill is live yet (then and now): adopting it installs the
    starting skill (the seed or `--skill`) where the agent reads it, so later nights start from there."""
    rows = [r for r in manifest["files"] if r["kind"] == "skill"]
    return (
        unchanged(manifest)
        and bool(rows)
        and all(r["live_sha256"] == ABSENT and file_pin(Path(r["live_path"])) == ABSENT for r in rows)
    )


def summary_of(report: dict[str, Any]) -> JSONObject:
    """Scores and the paired difference's interval, for `status`, from whichever the report holds."""
    out: JSONObject = {}
    scores = report.get("scores")
    if isinstance(scores, dict):
        out.update({k: scores[k] for k in ("before", "after") if k in scores})
    interval = report.get("interval")
    if not isinstance(interval, dict):
        gates = [g for g in report.get("gates") or [] if isinstance(g, dict) and g.get("mean_diff") is not None]
        interval = gates[-1] if gates else {}
    out.update({k: interval[k] for k in ("mean_diff", "lo", "hi") if k in interval})
    for k in ("tokens", "cost_usd"):
        if k in report:
            out[k] = report[k]
    return out


def load_manifest(night: Path) -> StagedManifest:
    """A staged night's manifest: read as an untrusted file, sealed by this machine (`seal`), of the shape staging
    writes; anything else is refused (ValueError) in one line naming the file."""
    path = night / MANIFEST
    if night.is_symlink() or not night.is_dir():
        raise ValueError(f"{night} is not a staged night (no folder of its own)")
    try:
        data = seal.read_sealed(night, MANIFEST)
    except seal.Unsealed:
        if staged_before_seals(night):
            raise seal.StagedBeforeSeals(
                f"night {night.name} was staged before adoption seals; cannot be adopted: run the night again"
            ) from None
        raise
    try:
        m = untrusted.parse_json(untrusted.decode(data, path), path)
    except untrusted.Untrusted as e:
        raise ValueError(f"{e}; stage the night again") from None
    if not isinstance(m, dict) or m.get("schema") != SCHEMA or m.get("version") != VERSION:
        raise ValueError(f"{path} is not a {SCHEMA} v{VERSION} manifest; stage the night again")
    problem = manifest_problem(m) or (f"its stamp is not {night.name}" if m["stamp"] != night.name else None)
    if problem:
        raise ValueError(f"{path}: {problem}; stage the night again")
    return cast(StagedManifest, m)  # sealed here and of staging's shape


def staged_before_seals(night: Path) -> bool:
    """An unsealed manifest that reads as one staging wrote for this project before this machine sealed anything: no
    seal file beside it, staging's shape, and a stamp older than the staging key (or no key yet). It only picks the
    message: such a night is refused exactly as a forged one is, since nothing else tells the two apart."""
    if untrusted.lstat(night, MANIFEST + seal.SUFFIX) is not None:
        return False
    try:
        m = untrusted.read_json(night, MANIFEST, seal.MAX_SEALED_BYTES)
    except untrusted.Untrusted:
        return False
    if not isinstance(m, dict) or m.get("schema") != SCHEMA or m.get("version") != VERSION or manifest_problem(m):
        return False
    if m["stamp"] != night.name or m["project"] != os.path.realpath(night.parent.parent.parent):
        return False
    made = seal.key_made()
    staged = datetime.strptime(m["stamp"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    return made is None or staged < made


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "stamp": str,
    "project": str,
    "skill_name": str,
    "live_skill_dir": str,
    "skill_roots": list,
    "verified": bool,
    "verdict": str,
    "summary": dict,
    "files": list,
}
_ROW_KEYS = ("kind", "rel", "sha256", "live_path", "live_realpath", "live_sha256", "root")


def manifest_problem(m: dict[str, Any]) -> Optional[str]:
    """What is wrong with a manifest's shape (the first thing found), None when it is as staging writes it."""
    for key, kind in _FIELD_TYPES.items():
        if not isinstance(m.get(key), kind):
            return f"`{key}` is missing or not a {getattr(kind, '__name__', kind)}"
    if not _STAMP.match(m["stamp"]):
        return f"`stamp` {m['stamp'][:40]!r} is not a UTC stamp"
    if not all(isinstance(r, str) for r in m["skill_roots"]):
        return "`skill_roots` holds a value that is not a path"
    if not all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in m["summary"].values()):
        return "`summary` holds a value that is not a number"
    for i, row in enumerate(m["files"]):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in _ROW_KEYS):
            return f"file row {i} lacks one of {', '.join(_ROW_KEYS)}"
        try:
            untrusted.parts_of(row["rel"])
        except untrusted.Untrusted as e:
            return f"file row {i}: {e}"
    return None


def nights(project: Path) -> list[Path]:
    """Staged nights, oldest first: plain folders with a manifest of their own (unfinished and symlinked ones are
    skipped; the listing is bounded, as any folder someone else can write into)."""
    root = staging_root(project)
    if not root.is_dir() or root.is_symlink():
        return []
    return [
        root / e.name
        for e in untrusted.list_dir(root)
        if e.is_dir and _STAMP.match(e.name) and untrusted.is_file(root, f"{e.name}/{MANIFEST}")
    ]
