"""RunDir's readers for the files the dashboard, the CLI and the driver used to open themselves: what each returns
for a present, a missing and a damaged file, and the dashboard views built on them."""

from __future__ import annotations

import json

import pytest

from skillopt_ray.dashboard import views
from skillopt_ray.runs.records import RecordError
from skillopt_ray.runs.rundir import RunDir  # noqa: E402


def test_a_launched_run_has_a_state_or_a_config_beside_its_identity(tmp_path):
    rd = RunDir(tmp_path)
    assert not rd.is_launched()
    (tmp_path / "config.yaml").write_text("seed: 1\n")
    assert not rd.is_launched()  # a lone config may be any folder's
    rd.write_identity({"identity": "abc"})
    assert rd.is_launched() and rd.read_identity() == {"identity": "abc"}
    other = RunDir(tmp_path / "other")
    other.write_json("state.json", {"phase": "train"})
    assert other.is_launched() and other.has_state()


def test_progress_and_ledger_read_as_empty_when_missing_and_progress_when_damaged(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.read_progress() == {} and rd.read_ledger() == {}
    rd.write_progress({"phase": "train", "written_at": 1.0})
    assert rd.read_progress() == {"phase": "train", "written_at": 1.0}
    (tmp_path / "progress.json").write_text('{"phase": "tr')  # cut by a kill: as good as none
    assert rd.read_progress() == {}
    (tmp_path / "ledger.json").write_text(json.dumps({"totals": {"cost_usd": 0.5}}))
    assert rd.read_ledger()["totals"] == {"cost_usd": 0.5}
    (tmp_path / "ledger.json").write_text("{not json")
    with pytest.raises(RecordError, match="ledger.json cannot be read as JSON"):
        rd.read_ledger()


def test_step_ids_come_from_the_step_folders_in_order(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.step_ids() == []
    for epoch, step in ((2, 1), (1, 10), (1, 2)):
        rd.write_step_text(epoch, step, "diff.md", "+ x\n")
    (tmp_path / "steps" / "notes").mkdir()  # not a step folder
    assert rd.step_ids() == [(1, 2), (1, 10), (2, 1)]
    assert RunDir.step_name(1, 2) == "e01_s002" and RunDir.parse_step_name("e01_s002") == (1, 2)
    assert RunDir.parse_step_name("../../etc") is None and RunDir.parse_step_name("e01_s002/x") is None
    assert rd.has_step_text(1, 2, "diff.md") and not rd.has_step_text(1, 2, "candidate.md")


def test_skills_by_version_and_the_best_skill(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.latest_skill_version() is None and rd.find_skill(0) is None and rd.read_best_skill() is None
    rd.write_skill(0, "v0")
    rd.write_skill(12, "v12")
    rd.write_best_skill("best")
    assert rd.latest_skill_version() == 12 and rd.find_skill(12) == "v12" and rd.find_skill(3) is None
    assert rd.read_best_skill() == "best"
    assert RunDir.skill_rel(12) == "skills/skill_v0012.md"


def test_jobs_eval_results_and_the_mlflow_record_round_trip(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.read_jobs() == [] and rd.read_eval_results("test") == [] and rd.read_mlflow_run() is None
    rd.add_job({"submission_id": "a"})
    rd.add_job({"submission_id": "b"})
    assert [j["submission_id"] for j in rd.read_jobs()] == ["a", "b"]
    rd.write_eval_results("test", [{"id": "t1", "hard": 1.0}])
    assert (tmp_path / "final" / "eval_test_results.json").is_file()
    assert rd.read_eval_results("test") == [{"id": "t1", "hard": 1.0}]
    rd.write_mlflow_run({"run_id": "r1"})
    assert rd.read_mlflow_run() == {"run_id": "r1"}


def test_dashboard_history_shows_a_step_redone_after_a_resume_once(tmp_path):
    rd = RunDir(tmp_path)
    rd.write_json("state.json", {"initial_score": 0.1, "global_step": 2})
    lines = [
        {"step": 1, "epoch": 1, "step_in_epoch": 1, "current_score": 0.1, "action": "reject"},
        {"step": 2, "epoch": 1, "step_in_epoch": 2, "current_score": 0.1, "action": "reject"},
        {"step": 2, "epoch": 1, "step_in_epoch": 2, "current_score": 0.3, "action": "accept"},  # redone
    ]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines) + '{"step": 3, "ep')
    points = views.curve(rd)
    assert [p["step"] for p in points] == [0, 1, 2]
    assert points[-1]["action"] == "accept" and points[-1]["current"] == 0.3


def test_dashboard_steps_read_the_gate_and_refuse_a_path_as_step_id(tmp_path):
    rd = RunDir(tmp_path)
    rd.write_json("steps/e01_s001/gate.json", {"action": "reject", "reason": "not above current", "best_score": 0.5})
    rd.write_step_text(1, 1, "diff.md", "+ rule\n")
    (step,) = views.steps(rd)
    assert step["id"] == "e01_s001" and step["action"] == "reject" and step["reason"] == "not above current"
    assert step["best"] == 0.5 and step["has_diff"] is True
    assert views.step_diff(tmp_path, "e01_s001") == "+ rule\n" and views.step_diff(tmp_path, "e01_s002") == ""
    with pytest.raises(ValueError, match="bad step id"):
        views.step_diff(tmp_path, "e01_s001/../../x")
