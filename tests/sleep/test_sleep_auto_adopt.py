"""`run --auto-adopt` as documented (issue 47, item 8): a night its gate accepted on its own validation tasks is
adopted at once; a night judged on borrowed train tasks (unverified) stays staged, never installed, exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted_server import ScriptedServer
from sleep_fixtures import PlantedRule, night, task_folder

from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.harvest.task_folder import write_tasks
from skillopt_ray.sleep.harvest.tasks import MinedTask

pytestmark = pytest.mark.slow


def report_of(project: Path) -> dict:
    (rep,) = (project / ".skillopt" / "nights" / "runs").glob("night-*/night/report.json")
    return json.loads(rep.read_text())


def test_auto_adopt_installs_an_accepted_night(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project)
    with ScriptedServer(PlantedRule("HELPFUL")) as srv:
        code = night(project, srv, "--name", "tidy", "--auto-adopt")
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert report_of(project)["verdict"] == "accepted"
    live = project / ".agents" / "skills" / "tidy" / "SKILL.md"
    assert "HELPFUL" in live.read_text() and "adopted" in out.out
    assert sleep_cli.main(["adopt", "--project", str(project), "--undo"]) == 0 and not live.exists()


def test_auto_adopt_never_installs_an_unverified_night(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    tasks = [MinedTask(f"Sort the list, part {i}.", "chat", [{"op": "contains", "arg": "DONE-OK"}]) for i in range(12)]
    write_tasks(project / ".skillopt" / "tasks", tasks, {t.id: "train" for t in tasks}, project, {})
    with ScriptedServer(PlantedRule("HELPFUL")) as srv:
        code = night(project, srv, "--auto-adopt")
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert report_of(project)["verdict"] == "unverified"
    assert "not adopted: the night is unverified" in out.err
    assert not (project / ".agents").exists()  # staged only
    assert len(list((project / ".skillopt" / "staging").glob("*/manifest.json"))) == 1
