"""A night end to end (issue 43): `python -m skillopt_ray.sleep run` on a harvested task folder, the runner's own
loop through Ray and the scripted server. The scripted target passes a task's check (part 1's check.py: the reply
must contain a phrase) with a probability set by the rules in its skill; the scripted analysts plant one rule.
A helpful rule is accepted by the sequential gate and written as SKILL.md where the agent reads it; a harmful one
is rejected and the night staged as changing nothing (adopt refuses it); a token cap stops the night, says which cap, and the rerun resumes it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from scripted_server import ScriptedServer
from sleep_fixtures import PlantedRule, night, task_folder

from skillopt_ray.cli import review_gate as review
from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.harvest.task_folder import write_tasks
from skillopt_ray.sleep.harvest.tasks import MinedTask
from skillopt_ray.sleep.night import state as night_state

pytestmark = pytest.mark.slow


def report_of(project: Path) -> dict[str, Any]:
    (rep,) = (project / ".skillopt" / "nights" / "runs").glob("night-*/night/report.json")
    return json.loads(rep.read_text())


def test_a_helpful_rule_is_accepted_and_proposed_as_a_skill(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project)
    with ScriptedServer(PlantedRule("HELPFUL")) as srv:
        code = night(project, srv, "--name", "tidy")
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "caps: none" in out.err  # said before anything was spent
    rep = report_of(project)
    assert rep["verdict"] == "accepted", rep
    g = [g for g in rep["gates"] if g["action"].startswith("accept")][0]
    assert g["lo"] is not None and g["lo"] <= g["mean_diff"] <= g["hi"]
    assert rep["live_path"] == str(project / ".agents" / "skills" / "tidy" / "SKILL.md")
    skill = Path(rep["proposed"]).read_text()
    assert skill.startswith("---\nname: tidy\ndescription: ") and "HELPFUL" in skill
    assert not (project / ".agents").exists()  # proposed, never installed by a night
    (staged,) = (project / ".skillopt" / "staging").iterdir()
    manifest = json.loads((staged / "manifest.json").read_text())
    assert manifest["verdict"] == "accepted" and manifest["skill_name"] == "tidy"
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 0
    assert (project / ".agents" / "skills" / "tidy" / "SKILL.md").read_text() == skill
    st = night_state.load(project)
    assert st.nights == 1 and st.current is None and list(st.val_looks.values()) == [1]
    with ScriptedServer(PlantedRule("HARMFUL")) as srv:  # the next night starts from the adopted skill
        assert night(project, srv, "--name", "tidy") == 0
    (second,) = [r for r in (project / ".skillopt" / "nights" / "runs").glob("night-*") if r.name != rep["run_name"]]
    assert "HELPFUL" in (project / ".skillopt" / "nights" / f"{second.name}.start.md").read_text()
    rep2 = json.loads((second / "night" / "report.json").read_text())
    assert rep2["verdict"] == "rejected" and Path(rep2["proposed"]).read_text() == skill  # unchanged: the adopted one


def test_a_harmful_rule_is_rejected_and_the_night_staged_as_changing_nothing(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project)
    with ScriptedServer(PlantedRule("HARMFUL")) as srv:
        code = night(project, srv)
    out = capsys.readouterr().out
    assert code == 0
    rep = report_of(project)
    assert rep["verdict"] == "rejected" and all(g["action"] == "reject" for g in rep["gates"]), rep
    (staged,) = (project / ".skillopt" / "staging").iterdir()  # staged all the same, for its report
    assert "changed nothing" in out and json.loads((staged / "manifest.json").read_text())["changed"] is False
    assert "HARMFUL" not in Path(rep["proposed"]).read_text()
    # no skill was live: adopting installs the skill the night started from, never the rejected edit
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 0
    (live,) = (project / ".agents" / "skills").glob("*/SKILL.md")
    assert live.read_text() == Path(rep["proposed"]).read_text()


def test_a_rule_that_changes_nothing_ties_and_is_rejected(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project)
    with ScriptedServer(PlantedRule("NEUTRAL")) as srv:
        code = night(project, srv)
    assert code == 0, capsys.readouterr().err[-2000:]
    rep = report_of(project)
    assert rep["verdict"] == "rejected" and all(g["action"] == "reject" for g in rep["gates"]), rep
    assert "NEUTRAL" not in Path(rep["proposed"]).read_text()


def test_a_token_cap_stops_the_night_says_so_and_the_rerun_resumes_it(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project)
    with ScriptedServer(PlantedRule("HELPFUL")) as srv:
        code = night(project, srv, "--max-tokens", "300")
        err = capsys.readouterr().err
        assert code == 3, err[-2000:]
        assert "stopped at its --max-tokens cap; nothing staged" in err
        assert not list((project / ".skillopt" / "nights" / "runs").glob("*/night"))
        assert not (project / ".skillopt" / "staging").exists()
        cur = night_state.load(project).current
        assert cur is not None
        code = night(project, srv)
    err = capsys.readouterr().err
    assert code == 0 and f"night {cur.run_name} (resumed)" in err
    assert report_of(project)["run_name"] == cur.run_name


def test_an_unreviewed_folder_is_refused_for_a_remote_model_unless_i_reviewed(tmp_path, capsys, monkeypatch):
    project = tmp_path / "proj"
    project.mkdir()
    folder = task_folder(project, n_val=3)
    monkeypatch.setenv("COMPATIBLE_API_KEY", "k")
    argv = ["dry-run", "--project", str(project), "--tasks", str(folder), "llm=compatible",
            "llm.base_url=https://api.example.com/v1", "ray.address=127.0.0.1:9"]  # fmt: skip
    assert sleep_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "review.json" in err and "--i-reviewed" in err and "\n" not in err
    assert review.read(folder)["reviewed"] is False
    assert not (project / ".skillopt" / "nights").exists()


def test_bad_night_flags_are_refused_with_one_line(tmp_path, capsys):
    for argv, said in (
        (["run", "--project", str(tmp_path), "--max-cost", "-1"], "--max-cost must be >= 0"),
        (["run", "--project", str(tmp_path), "--skill", str(tmp_path / "no.md")], "is not a file"),
    ):
        assert sleep_cli.main(argv) == 2
        assert re.search(said, capsys.readouterr().err)


class BreaksOne(PlantedRule):
    """The planted rule lifts every task a lot but breaks `broken`, which the starting skill always passes."""

    def __init__(self, broken: str):
        super().__init__("HELPFUL")
        self.broken = broken

    def target_reply(self, body: dict[str, Any], key: str) -> str:
        system = "\n".join(str(m.get("content") or "") for m in body["messages"])
        ruled = "HELPFUL" in system
        if f"/{self.broken}/" in key:
            return "I gave up." if ruled else "All done: DONE-OK"
        draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
        return "All done: DONE-OK" if draw < (0.95 if ruled else 0.3) else "I gave up."


def test_no_regression_refuses_a_mean_improving_rule_that_breaks_one_task(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    folder = task_folder(project)
    broken = sorted(t.name for t in folder.iterdir() if t.is_dir() and '"val"' in (t / "task.json").read_text())[0]
    with ScriptedServer(BreaksOne(broken)) as srv:
        code = night(project, srv, "optimizer.gate_no_regression=true")
    assert code == 0, capsys.readouterr().err[-3000:]
    rep = report_of(project)
    (g,) = rep["gates"]
    assert g["action"] == "reject" and g["mean_diff"] > 0, g
    assert "gate_no_regression" in g["reason"] and broken in g["reason"], g["reason"]
    assert rep["verdict"] == "rejected"


def test_a_dry_run_from_a_hand_written_skill_keeps_its_front_matter_and_stages_nothing(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    own = project / ".agents" / "skills" / "tidy" / "SKILL.md"
    own.parent.mkdir(parents=True)
    own.write_text("---\nname: tidy\ndescription: Tidy the notes.\n---\n\nKeep the headings as they are.\n")
    before = own.read_bytes()
    task_folder(project)
    with ScriptedServer(PlantedRule("HELPFUL")) as srv:
        code = sleep_cli.main(
            ["dry-run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks"), "--skill", str(own),
             "--max-cost", "5", "llm=compatible", f"llm.base_url={srv.base_url}", "tracking=none"]
        )  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "caps: 5.0 USD" in out.err and "dry run: nothing staged" in out.out
    rep = report_of(project)
    assert rep["verdict"] == "accepted" and rep["live_path"] == str(own)
    proposed = Path(rep["proposed"]).read_text()
    assert proposed.startswith("---\nname: tidy\ndescription: Tidy the notes.\n---\n")
    assert "Keep the headings as they are." in proposed and "HELPFUL" in proposed
    assert own.read_bytes() == before and not (project / ".skillopt" / "staging").exists()
    assert not night_state.path(project).exists()  # a dry run is not counted as a night


def test_a_folder_without_validation_tasks_gates_on_train_and_is_never_reported_accepted(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    tasks = [MinedTask(f"Sort the list, part {i}.", "chat", [{"op": "contains", "arg": "DONE-OK"}]) for i in range(12)]
    write_tasks(project / ".skillopt" / "tasks", tasks, {t.id: "train" for t in tasks}, project, {})
    with ScriptedServer(PlantedRule("HELPFUL")) as srv:
        code = night(project, srv, tracking="tracking.mlflow=true")
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    rep = report_of(project)
    assert rep["verdict"] == "unverified", rep
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / '.skillopt' / 'nights' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("sleep-proj")  # one experiment per project, one run per night
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == rep["run_name"] and run.info.status == "FINISHED"
    assert any(n.startswith("unverified") for n in rep["notes"])
    (staged,) = (project / ".skillopt" / "staging").iterdir()
    assert json.loads((staged / "manifest.json").read_text())["verified"] is False
