"""A bad receipt (unsealed, forged, truncated) is its own night's problem: `adopt` without `--night` looks past a
night whose sealed receipts say it has nothing to adopt (or undo), forged ones left aside, and adopts the night meant;
an adoption that needs the bad night's receipts is refused in one line naming the file and why, writing nothing."""

from __future__ import annotations

import json
import stat
import tempfile
from pathlib import Path

import pytest

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.proposal import staging
from skillopt_ray.sleep.proposal.staging import NightProposal
from skillopt_ray.sleep.proposal.staging_skills import stage_skills

OLDER, NEWER = "20261127T041500Z", "20261128T041500Z"
SKILLS = {OLDER: ("deploy", "review"), NEWER: ("lint", "docs")}


def live_text(name: str) -> str:
    return f"---\nname: {name}\ndescription: how we {name}\n---\n\nRun make {name}.\n"


def new_text(name: str) -> str:
    return live_text(name).replace("Run make", "Run make test, then make")


@pytest.fixture
def proj(tmp_path):
    """A project with two staged nights of two skills each (different skills: adopting one leaves the other's pins
    as staged)."""
    project = tmp_path / "proj"
    root = project / ".agents" / "skills"
    for stamp, names in SKILLS.items():
        props = []
        for name in names:
            (root / name).mkdir(parents=True)
            (root / name / "SKILL.md").write_text(live_text(name))
            src = Path(tempfile.mkdtemp(dir=tmp_path, prefix=f"proposal-{name}-"))
            (src / "SKILL.md").write_text(new_text(name))
            report = {"verified": True, "verdict": "accepted", "changed": True}
            props.append(NightProposal(project, stamp, name, src, root / name, [root], f"# {name}\n", report))
        stage_skills(project, stamp, props, "# night\n")
    return project


def adopt(project: Path, *args: str) -> int:
    return main(["adopt", "--project", str(project), *args])


def live(project: Path) -> dict[str, str]:
    return {p.parent.name: p.read_text() for p in sorted((project / ".agents" / "skills").glob("*/SKILL.md"))}


def receipts(project: Path, stamp: str) -> Path:
    return staging.staging_root(project) / stamp / "receipts"


def forge(project: Path, stamp: str, name: str, skills: list[str]) -> Path:
    """A receipt no adoption of this machine's wrote (no seal): it claims `skills` moved."""
    folder = receipts(project, stamp)
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({"op": "adopt", "stamp": stamp, "skills": skills, "steps": [], "step_skills": []}))
    return path


def snapshot(root: Path) -> dict[str, object]:
    return {str(p): p.read_bytes() if stat.S_ISREG(p.lstat().st_mode) else None for p in sorted(root.rglob("*"))}


def test_a_forged_receipt_of_a_night_with_nothing_pending_does_not_refuse_adopting_another(proj, capsys):
    assert adopt(proj, "--night", NEWER) == 0  # lint and docs adopted: the newer night has nothing pending
    forge(proj, NEWER, "003-adopt.json", ["lint"])
    capsys.readouterr()
    assert adopt(proj) == 0, capsys.readouterr().err
    assert f"adopted deploy, review of night {OLDER}" in capsys.readouterr().out
    assert live(proj) == {n: new_text(n) for names in SKILLS.values() for n in names}


def test_a_forged_receipt_of_a_never_adopted_night_does_not_refuse_undoing_another(proj, capsys):
    assert adopt(proj, "--night", OLDER) == 0
    forge(proj, NEWER, "001-adopt.json", ["lint", "docs"])  # claims the newer night adopted: it never was
    capsys.readouterr()
    assert adopt(proj, "--undo") == 0, capsys.readouterr().err
    assert f"undid deploy, review of night {OLDER}" in capsys.readouterr().out
    assert live(proj) == {n: live_text(n) for names in SKILLS.values() for n in names}


def test_an_adoption_that_needs_the_bad_receipt_is_refused_in_one_line_naming_it(proj, capsys):
    assert adopt(proj, "--night", NEWER, "--skill", "lint") == 0
    real = receipts(proj, NEWER) / "001-adopt.json"
    real.write_bytes(real.read_bytes()[:40])  # cut short: its seal no longer matches, lint's state is unknown
    capsys.readouterr()
    before = snapshot(proj)
    for args in ((), ("--night", NEWER), ("--night", NEWER, "--skill", "docs")):
        assert adopt(proj, *args) == 2, args  # the newest night with something to adopt, by what can be read
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("error: ") and str(real) in err, err
        assert snapshot(proj) == before


def test_a_forged_adopted_receipt_of_a_one_skill_night_does_not_refuse_undoing_another(tmp_path, capsys):
    """One-skill nights: a night whose receipt is unsealed is neither adopted nor pending (as `status` says); an undo
    without --night undoes the newest night that is adopted, and one of the forged night is refused naming the file."""
    project = tmp_path / "single"
    root = project / ".agents" / "skills"
    for stamp, name in ((OLDER, "tidy"), (NEWER, "lint")):
        (root / name).mkdir(parents=True)
        (root / name / "SKILL.md").write_text(live_text(name))
        src = Path(tempfile.mkdtemp(dir=tmp_path, prefix=f"proposal-{name}-"))
        (src / "SKILL.md").write_text(new_text(name))
        report = {"verified": True, "verdict": "accepted", "changed": True}
        staging.stage_night(NightProposal(project, stamp, name, src, root / name, [root], "# n\n", report))
    assert adopt(project, "--night", OLDER) == 0
    forged = staging.staging_root(project) / NEWER / "adopted.json"
    forged.write_text(json.dumps({"stamp": NEWER, "steps": []}))  # says "adopted", sealed by no one
    capsys.readouterr()
    assert adopt(project, "--undo") == 0, capsys.readouterr().err
    assert f"undid night {OLDER}" in capsys.readouterr().out
    assert live(project) == {"lint": live_text("lint"), "tidy": live_text("tidy")}
    before = snapshot(project)
    assert adopt(project, "--undo", "--night", NEWER) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(forged) in err and "no seal" in err, err
    assert snapshot(project) == before
