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


def concluded(tmp: Path, project: Path, name: str, changed: bool = True):
    """What a several-skill night's run leaves of one skill (skills_night.finish takes it): its proposed SKILL.md
    under the run's night/skill/<name>/, the report beside it, the gate's verdict."""
    from skillopt_ray.sleep.night.report import GateLine, NightReport
    from skillopt_ray.sleep.night.runner import Concluded, NightOptions

    run = tmp / f"night-{STAMP}-{name}"
    folder = run / "night" / "skill" / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(NEW[name] if changed else LIVE[name])
    (run / "night" / "report.md").write_text(f"# {name}\n")
    gate = GateLine("e01_s001", "accept_new_best" if changed else "reject", "r", 0.25, 0.05, 0.45)
    rep = NightReport(f"night-{STAMP}-{name}", str(run), {"train": 2, "val": 5, "test": 1}, [gate],
                      "accepted" if changed else "rejected")  # fmt: skip
    live = project / ".agents" / "skills" / name / "SKILL.md"
    opts = NightOptions(project=project, target="codex", skill=live, name=name)
    return opts, Concluded(folder, live, rep, "fp", 1)


def test_memory_is_carried_into_a_night_of_several_skills(tmp_path, proj, capsys):
    """Issue 47: `--memory` was dropped from a night that trained the skills you already use (a note said so). Now the
    changed skills' rules go into AGENTS.md, a marked block per skill, staged as one more entry of the night's one
    manifest: adopted with the skills or alone (`--skill AGENTS.md`), undone byte for byte; the user's text stays."""
    from skillopt_ray.sleep.night.runner import NightOptions
    from skillopt_ray.sleep.night.skills_night import finish
    from skillopt_ray.sleep.proposal import memory

    agents = proj / "AGENTS.md"
    agents.write_bytes(b"# House rules\r\n\r\nUse tabs.\r\n")
    before = agents.read_bytes()
    done = [concluded(tmp_path, proj, "deploy"), concluded(tmp_path, proj, "review", changed=False)]
    opts = NightOptions(project=proj, target="codex", memory=True)
    assert finish(opts, f"night-{STAMP}", done) == 0
    (night,) = (proj / ".skillopt" / "staging").iterdir()
    m = json.loads((night / "manifest.json").read_text())
    assert [e["skill_name"] for e in m["skills"]] == ["deploy", "review", "AGENTS.md"], m["skills"]
    proposed = (night / "memory" / "AGENTS.md").read_bytes().decode()
    assert proposed.startswith(before.decode()) and memory.block_text(proposed, "review") is None  # changed only
    assert "Run make test, then make deploy." in memory.block_text(proposed, "deploy")
    assert adopt(proj, "--skill", "deploy") == 0 and agents.read_bytes() == before  # the skill alone
    assert adopt(proj, "--skill", "AGENTS.md") == 0  # the memory block alone
    assert agents.read_bytes() == proposed.encode() and live(proj)["review"] == LIVE["review"]
    capsys.readouterr()
    assert main(["status", "--project", str(proj)]) == 0
    out = capsys.readouterr().out
    assert f"{STAMP}  AGENTS.md  accepted  adopted" in out and f"{STAMP}  review  rejected" in out, out
    assert adopt(proj, "--undo") == 0
    assert agents.read_bytes() == before and live(proj) == LIVE
    capsys.readouterr()


def test_a_several_skill_night_without_memory_stages_no_memory_file(tmp_path, proj):
    from skillopt_ray.sleep.night.runner import NightOptions
    from skillopt_ray.sleep.night.skills_night import finish

    done = [concluded(tmp_path, proj, "deploy")]
    assert finish(NightOptions(project=proj, target="codex"), f"night-{STAMP}", done) == 0
    (night,) = (proj / ".skillopt" / "staging").iterdir()
    m = json.loads((night / "manifest.json").read_text())
    assert [e["skill_name"] for e in m["skills"]] == ["deploy"] and not (night / "memory").exists()
