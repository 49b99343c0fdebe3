"""A night whose gate accepted nothing is staged all the same (`changed: false`): `status` shows it as rejected,
never pending, and `adopt` refuses it in one line, the live skill untouched. A later night starts from the learned
skill installed where it would propose one, not from the empty seed."""

from __future__ import annotations

import json
from pathlib import Path

from sleep_fixtures import LIVE, live_bytes, propose, refused

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.night import runner as night
from skillopt_ray.sleep.night.runner import NightOptions
from skillopt_ray.sleep.proposal import status
from skillopt_ray.sleep.proposal.staging import stage_night


def unchanged(tmp: Path, project: Path, stamp: str) -> Path:
    p = propose(tmp, project, stamp, text=LIVE, verified=False)
    p.report = {"verdict": "rejected", "changed": False, "gates": [{"action": "reject", "mean_diff": 0.0}]}
    return stage_night(p)


def make_project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    (project / ".agents" / "skills" / "deploy").mkdir(parents=True)
    (project / ".agents" / "skills" / "deploy" / "SKILL.md").write_text(LIVE)
    return project


def test_a_night_that_changed_nothing_is_staged_rejected_and_adopt_refuses_it(tmp_path, capsys):
    project = make_project(tmp_path)
    folder = unchanged(tmp_path, project, "20261128T041500Z")
    assert json.loads((folder / "manifest.json").read_text())["changed"] is False
    st = status.collect(project)
    assert st["pending"] == [] and st["nights"][0]["state"].startswith("changed nothing"), st
    assert "  rejected  changed nothing (nothing to adopt)" in status.render(st)
    err = refused(project, capsys=capsys)
    assert err == "error: nothing to adopt: night 20261128T041500Z changed nothing"
    err = refused(project, "--night", "20261128T041500Z", capsys=capsys)
    assert err == "error: nothing to adopt: night 20261128T041500Z changed nothing"


def test_bare_adopt_takes_the_newest_night_that_changed_something(tmp_path, capsys):
    project = make_project(tmp_path)
    stage_night(propose(tmp_path, project, "20261128T041500Z"))  # accepted, changed
    unchanged(tmp_path, project, "20261129T041500Z")
    assert status.collect(project)["pending"] == ["20261128T041500Z"]
    assert main(["adopt", "--project", str(project)]) == 0
    assert "adopted night 20261128T041500Z" in capsys.readouterr().out
    assert b"make test" in live_bytes(project)["SKILL.md"]


def test_a_night_starts_from_the_installed_learned_skill(tmp_path):
    project = tmp_path / "proj"
    opts = NightOptions(project=project, name="tidy")
    assert night.starting_skill(opts) is None  # nothing installed: the empty seed
    live = project / ".agents" / "skills" / "tidy" / "SKILL.md"
    live.parent.mkdir(parents=True)
    live.write_text("---\nname: tidy\ndescription: d\n---\n\nKeep notes short.\n")
    assert night.starting_skill(opts) == live
    own = tmp_path / "own.md"
    own.write_text("Mine.\n")
    assert night.starting_skill(NightOptions(project=project, name="tidy", skill=own)) == own  # --skill wins
    assert night.starting_skill(NightOptions(project=project, name="tidy", target="claude_code")) is None
    from sleep_fixtures import task_folder

    tasks = task_folder(project, n_val=2)
    p = night.plan(opts, tasks, "night-20261129T010000Z", False)
    (init,) = [o for o in p.overrides if o.startswith("skill_init=")]
    start = project / ".skillopt" / "nights" / "night-20261129T010000Z.start.md"
    assert str(start) in init and start.read_text().strip() == "Keep notes short."  # the body; front matter kept aside


def test_a_first_night_that_changed_nothing_installs_the_skill_it_started_from(tmp_path, capsys):
    """No skill is live yet: adopting the unchanged night installs its starting skill (then later nights improve it);
    once that skill is live, an unchanged night has nothing to adopt again."""
    project = tmp_path / "proj"
    project.mkdir()
    unchanged(tmp_path, project, "20261128T041500Z")
    st = status.collect(project)
    assert st["pending"] == ["20261128T041500Z"] and "installs the skill it started from" in st["nights"][0]["state"]
    assert main(["adopt", "--project", str(project)]) == 0
    out = capsys.readouterr().out
    assert "adopted night 20261128T041500Z" in out and "its gate accepted no edit" in out
    assert live_bytes(project)["SKILL.md"] == LIVE.encode()
    assert status.collect(project)["nights"][0]["state"] == "adopted"
    unchanged(tmp_path, project, "20261129T041500Z")  # staged over the live skill it started from
    assert status.collect(project)["pending"] == []
    err = refused(project, capsys=capsys)
    assert err == "error: nothing to adopt: night 20261129T041500Z changed nothing"
