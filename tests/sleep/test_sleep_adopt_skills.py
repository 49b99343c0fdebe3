"""A night that trained several skills, staged as one night (one manifest listing each skill): adopted per skill or
all at once, undone per skill or all at once, byte-identical; a refusal (a live file changed, an unverified gate)
leaves every live file untouched; `status` lists each skill's verdict and state."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.proposal.staging import NightProposal
from skillopt_ray.sleep.proposal.staging_skills import stage_skills

STAMP = "20261128T041500Z"
LIVE = {n: f"---\nname: {n}\ndescription: how we {n}\n---\n\nRun make {n}.\n" for n in ("deploy", "review")}
NEW = {n: f"---\nname: {n}\ndescription: how we {n}\n---\n\nRun make test, then make {n}.\n" for n in LIVE}


def proposal(tmp: Path, project: Path, name: str, changed: bool = True, verified: bool = True) -> NightProposal:
    src = Path(tempfile.mkdtemp(dir=tmp, prefix=f"proposal-{name}-"))
    (src / "SKILL.md").write_text(NEW[name] if changed else LIVE.get(name, "---\nname: x\n---\n\nNothing yet.\n"))
    verdict = ("accepted" if verified else "unverified") if changed else "rejected"
    report = {"verified": verified, "verdict": verdict, "changed": changed,
              "interval": {"mean_diff": 0.25, "lo": 0.05, "hi": 0.45}}  # fmt: skip
    root = project / ".agents" / "skills"
    return NightProposal(project, STAMP, name, src, root / name, [root], f"# {name}\n", report)


@pytest.fixture
def proj(tmp_path):
    project = tmp_path / "my project"
    for name, text in LIVE.items():
        (project / ".agents" / "skills" / name).mkdir(parents=True)
        (project / ".agents" / "skills" / name / "SKILL.md").write_text(text)
    return project


def live(project: Path) -> dict[str, str]:
    return {p.parent.name: p.read_text() for p in sorted((project / ".agents" / "skills").glob("*/SKILL.md"))}


def adopt(project: Path, *args: str) -> int:
    return main(["adopt", "--project", str(project), *args])


def test_two_skills_one_manifest_adopted_and_undone_per_skill_and_all_at_once(tmp_path, proj, capsys):
    props = [proposal(tmp_path, proj, "deploy"), proposal(tmp_path, proj, "review")]
    night = stage_skills(proj, STAMP, props, "# night\n")
    m = json.loads((night / "manifest.json").read_text())
    assert [e["skill_name"] for e in m["skills"]] == ["deploy", "review"]
    assert len(m["files"]) == 2 and m["verified"] is True and m["changed"] is True
    assert adopt(proj, "--skill", "review") == 0
    assert live(proj) == {"deploy": LIVE["deploy"], "review": NEW["review"]}
    capsys.readouterr()
    assert main(["status", "--project", str(proj)]) == 0
    out = capsys.readouterr().out
    assert f"{STAMP}  deploy  accepted  pending" in out and f"{STAMP}  review  accepted  adopted" in out, out
    from skillopt_ray.sleep.proposal import staging, status

    assert status.night_state(night, staging.load_manifest(night)) == "adopted: review; pending: deploy"
    assert adopt(proj) == 0  # all at once: the one still pending
    assert live(proj) == NEW
    assert adopt(proj, "--undo", "--skill", "deploy") == 0
    assert live(proj) == {"deploy": LIVE["deploy"], "review": NEW["review"]}
    assert adopt(proj, "--undo") == 0  # all at once: the one still adopted
    assert live(proj) == LIVE
    capsys.readouterr()
    assert adopt(proj) == 2  # nothing pending any more (an undone skill is not adopted again)
    assert f"night {STAMP} has no pending skill" in capsys.readouterr().err


def test_all_at_once_is_refused_whole_when_one_skill_changed_since_staging(tmp_path, proj, capsys):
    stage_skills(proj, STAMP, [proposal(tmp_path, proj, "deploy"), proposal(tmp_path, proj, "review")], "#\n")
    (proj / ".agents" / "skills" / "review" / "SKILL.md").write_text("edited by hand\n")
    before = live(proj)
    capsys.readouterr()
    assert adopt(proj) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "review" in err and "\n" not in err.strip()
    assert live(proj) == before  # deploy was not written either
    assert adopt(proj, "--skill", "deploy") == 0 and live(proj)["deploy"] == NEW["deploy"]
    assert adopt(proj, "--skill", "nosuch") == 2


def test_an_unverified_skill_needs_the_flag_and_an_unchanged_one_stages_no_file(tmp_path, proj, capsys):
    props = [proposal(tmp_path, proj, "deploy", verified=False), proposal(tmp_path, proj, "review", changed=False)]
    night = stage_skills(proj, STAMP, props, "#\n")
    m = json.loads((night / "manifest.json").read_text())
    assert {e["skill_name"]: e["files"] for e in m["skills"]}["review"] == []
    assert m["verified"] is False
    before = live(proj)
    assert adopt(proj) == 2 and "unverified" in capsys.readouterr().err and live(proj) == before
    assert adopt(proj, "--allow-unverified") == 0
    assert live(proj) == {"deploy": NEW["deploy"], "review": LIVE["review"]}
    capsys.readouterr()
    assert main(["status", "--project", str(proj)]) == 0
    assert "review  rejected  changed nothing" in capsys.readouterr().out


class Killed(BaseException):
    pass


def test_an_all_at_once_adoption_killed_midway_is_rolled_back_whole(tmp_path, proj, monkeypatch, capsys):
    from skillopt_ray.sleep.proposal import adopt as adopt_mod

    stage_skills(proj, STAMP, [proposal(tmp_path, proj, "deploy"), proposal(tmp_path, proj, "review")], "#\n")
    real_put, calls = adopt_mod.put, []

    def put_then_die(project, live, copy):
        calls.append(live)
        real_put(project, live, copy)
        raise Killed  # deploy's file written, review's not, no receipt

    monkeypatch.setattr(adopt_mod, "put", put_then_die)
    with pytest.raises(Killed):
        adopt(proj)
    assert len(calls) == 1 and live(proj)["deploy"] == NEW["deploy"] and adopt_mod.wal_path(proj).exists()
    monkeypatch.setattr(adopt_mod, "put", real_put)
    capsys.readouterr()
    assert adopt(proj, "--skill", "review") == 0  # the next adopt rolls the whole transaction back first
    assert "rolled back" in capsys.readouterr().out
    assert live(proj) == {"deploy": LIVE["deploy"], "review": NEW["review"]}
    assert adopt(proj, "--undo") == 0 and live(proj) == LIVE
