"""MLflow as its users expect: experiments open as model training (not GenAI traces), metrics grouped by prefix,
sweep trials named by their swept values, skill versions with step and score, an HTML skill history with diffs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import checked

from skillopt_ray.runs.tracking import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    Tracker,
    metric_key,
    sweep_run_name,
    ui_link,
)


@pytest.fixture(scope="module")
def store_template(tmp_path_factory) -> Path:
    """One migrated sqlite store per module (a fresh one costs seconds); tests copy it."""
    root = tmp_path_factory.mktemp("store")
    Tracker(True, f"sqlite:///{root / 'mlflow.db'}", "template", root / "artifacts")
    return root / "mlflow.db"


def _tracker(tmp_path: Path, template: Path, experiment: str = "alfworld") -> Tracker:
    shutil.copy(template, tmp_path / "mlflow.db")
    return Tracker(True, f"sqlite:///{tmp_path / 'mlflow.db'}", experiment, tmp_path / "artifacts")


def test_metric_groups():
    assert [
        metric_key(n)
        for n in (
            "current_score",
            "candidate_gate_score",
            "selection_score",
            "rollout_hard",
            "test_hard_best",
            "best_selection_score",
            "eval_soft.pick_and_place",
        )
    ] == [
        "score/current_score",
        "score/candidate_gate_score",
        "score/current_score",  # the initial skill's selection score: step 0 of the current skill's
        "score/rollout_hard",
        "score/test_hard_best",
        "score/best_selection_score",
        "score/eval_soft.pick_and_place",
    ]
    assert [metric_key(n) for n in ("tokens_total", "tokens.target.rollout", "cost_usd_total")] == [
        "tokens/tokens_total",
        "tokens/tokens.target.rollout",
        "tokens/cost_usd_total",
    ]
    assert metric_key("wall_time_s") == "time/wall_time_s"
    assert [
        metric_key(n)
        for n in ("accepted", "n_edits_merged", "edit_budget", "infra_errors", "tasks_compared", "slow_update_accepted")
    ] == [
        "counts/accepted",
        "counts/n_edits_merged",
        "counts/edit_budget",
        "counts/infra_errors",
        "counts/tasks_compared",
        "counts/slow_update_accepted",
    ]
    assert [metric_key(n) for n in ("skill_version", "skill_len")] == ["skill/skill_version", "skill/skill_len"]
    # the scores' intervals sit with the scores, the number of tasks behind them with the counts
    assert [metric_key(n) for n in ("best_selection_ci_lo", "test_hard_best_ci_hi", "test_n_tasks")] == [
        "score/best_selection_ci_lo",
        "score/test_hard_best_ci_hi",
        "counts/test_n_tasks",
    ]
    assert metric_key("something_new") == "other/something_new" and metric_key("score/x") == "score/x"


def test_ui_link_opens_the_model_training_view():
    assert (
        ui_link({"experiment_id": "3", "run_id": "abc"})
        == "http://127.0.0.1:5000/#/experiments/3/runs/abc?workflowType=machine_learning"
    )
    # the experiment's bare page opens its GenAI Traces tab: the plain link names the runs table
    assert ui_link({"experiment_id": "3"}) == "http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning"
    assert ui_link({}) == "http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"


def test_sweep_trial_names_show_swept_values():
    tags = {
        "sweep": "lr",
        "seed": "43",
        "sweep.param.optimizer.learning_rate": "4",
        "sweep.param.optimizer.gate_metric": "soft",
    }
    assert sweep_run_name(tags, "alfworld-train-seed43-abc") == "gate_metric=soft learning_rate=4 seed=43"
    clash = {"sweep.param.optimizer.x": "1", "sweep.param.env.x": "2", "seed": "1"}
    assert sweep_run_name(clash, "d") == "env.x=2 optimizer.x=1 seed=1"
    assert sweep_run_name({"seed": "1"}, "alfworld-train-seed1-abc") == "alfworld-train-seed1-abc"


def test_tracker_experiment_kind_names_and_groups(tmp_path, store_template):
    tr = _tracker(tmp_path, store_template)
    exp = tr.client.get_experiment(tr.experiment_id)
    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"
    tags = {"seed": "43", "sweep.param.optimizer.learning_rate": "4", "run_dir": str(tmp_path / "rd")}
    saved: dict = {}
    run_id = tr.start({}, "alfworld-train-seed43-abc", tags, saved.update)
    run = tr.client.get_run(run_id)
    assert run.info.run_name == "learning_rate=4 seed=43"
    tr.log_metrics({"current_score": 0.5, "accepted": 1.0, "tokens_total": 100, "wall_time_s": 3.0, "skill_len": 10}, 1)
    assert set(tr.client.get_run(run_id).data.metrics) == {
        "score/current_score",
        "counts/accepted",
        "tokens/tokens_total",
        "time/wall_time_s",
        "skill/skill_len",
    }
    # a run resumed under an older name is renamed; an experiment made before the kind tag gets it
    tr.client.update_run(run_id, name="old-name")
    tr.client.delete_experiment_tag(tr.experiment_id, EXPERIMENT_KIND_TAG)
    again = Tracker(True, tr.uri, "alfworld", tmp_path / "artifacts")
    assert again.client.get_experiment(tr.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert again.start({"run_id": run_id}, "x", tags, saved.update) == run_id
    assert again.client.get_run(run_id).info.run_name == "learning_rate=4 seed=43"


def test_skill_history_logged_when_asked_and_when_the_run_ends_never_by_metrics(tmp_path, store_template):
    from report_helpers import make_run

    rd = make_run(tmp_path / "rd")
    tr = _tracker(tmp_path, store_template)
    run_id = tr.start({}, "r", {"run_dir": str(rd)}, lambda rec: None)
    tr.log_metrics({"current_score": 0.5, "skill_version": 1, "test_hard_best": 1.0}, 1)
    assert tr.client.list_artifacts(run_id) == [] and not (rd / "skill_history.html").exists()  # no side effect
    tr.finish("FINISHED")
    assert tr.client.get_run(run_id).info.status == "FINISHED"
    names = {a.path for a in tr.client.list_artifacts(run_id)}
    assert {"skill_history.html", "skill_versions.json"} <= names
    local = Path(tr.client.download_artifacts(run_id, "skill_versions.json", str(tmp_path / "dl")))
    rows = json.loads(local.read_text())
    assert [(r["version"], r["step"], r["selection_score"]) for r in rows] == [
        (0, 0, 0.25),
        (1, 1, 0.5),
        (2, None, None),
        (3, None, 0.75),
    ]
    assert rows[1]["made_by"] == "step 1 (accept_new_best)" and rows[1]["artifact"] == "skills/skill_v0001.md"
    page = Path(tr.client.download_artifacts(run_id, "skill_history.html", str(tmp_path / "dl"))).read_text()
    assert '<span class="add">+- RULE-heat: use the microwave</span>' in page


def test_a_run_without_skill_versions_ends_without_a_history_page(tmp_path, store_template):
    """An eval-only run keeps no skill versions (its skills folder stays empty): it ends FINISHED with no empty
    history page written or logged."""
    rd = tmp_path / "rd"
    (rd / "skills").mkdir(parents=True)
    tr = _tracker(tmp_path, store_template)
    run_id = tr.start({}, "eval", {"run_dir": str(rd)}, lambda rec: None)
    tr.finish("FINISHED")
    assert tr.client.get_run(run_id).info.status == "FINISHED"
    assert tr.client.list_artifacts(run_id) == [] and not (rd / "skill_history.html").exists()


@pytest.mark.slow
def test_training_run_in_mlflow(ray_cluster, scripted, alfworld_root, tmp_path):
    """A real scripted run: grouped metrics that compare reads back, the skill history artifacts, the run's story."""
    from mlflow.tracking import MlflowClient

    from skillopt_ray import cli
    from skillopt_ray.compare import records as compare_records
    from skillopt_ray.runs import report

    overrides = [
        "+experiment=alfworld",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={scripted.base_url}",
        f"env.data_dir={alfworld_root}",
        f"output_dir={tmp_path / 'out'}",
        "env.max_turns=10",
        "debug.progress=off",
        "env.options.skip_missing_games=true",
    ]
    data = cli.plain(cli.compose(overrides))
    data = cli.resolve_paths(data)
    assert cli.run_one(checked(data)) == 0
    rd = cli.run_dir_for(data)
    ml = json.loads((rd / "mlflow_run.json").read_text())
    client = MlflowClient(ml["tracking_uri"])
    run = client.get_run(ml["run_id"])
    assert client.get_experiment(run.info.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    keys = set(run.data.metrics)
    assert keys and all(k.split("/", 1)[0] in ("score", "tokens", "time", "counts", "skill") for k in keys), sorted(
        keys
    )
    assert {
        "score/current_score",
        "score/test_hard_best",
        "counts/accepted",
        "tokens/tokens_total",
        "time/wall_time_s",
    } <= keys
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "score/current_score")]
    assert steps == [0, 1, 2]  # the initial skill's score is step 0 of the same chart
    assert "score/selection_score" not in keys
    # compare reads the grouped names back (its MLflow path, not the run directory)
    rec = compare_records._record_from_mlflow_run(client, run, {}, 42)
    assert [p.step for p in rec.curve] == [0, 1, 2] and rec.curve[1].accepted == 1.0 and rec.metrics["tokens"] > 0
    # skill versions with their step and score, and the HTML history, as artifacts
    versions = json.loads(
        Path(client.download_artifacts(run.info.run_id, "skill_versions.json", str(tmp_path / "dl"))).read_text()
    )
    history = json.loads((rd / "history.json").read_text())
    accepted = [h for h in history if h["action"].startswith("accept")]
    assert [(v["step"], v["selection_score"]) for v in versions if v["made_by"].startswith("step")] == [
        (h["step"], h["current_score"]) for h in accepted
    ]
    page = Path(client.download_artifacts(run.info.run_id, "skill_history.html", str(tmp_path / "dl"))).read_text()
    assert "Versions of the current skill" in page and '<span class="add">' in page
    # the run's story from its directory
    text = report.story_text(report.load(rd))
    assert "step 1 (epoch 1, step 1): accept_new_best -> skill v0001" in text
    assert "reason: candidate 1.0000 vs current 0.0000" in text and "flipped to pass: " in text
    assert "final (test split)" in text and "epoch boundary, meta skill: write_meta_skill" in text


def test_initial_score_is_step_zero_of_current_score_and_tags_are_tags(tmp_path, store_template):
    """The initial skill's score and every step's current score are one MLflow key; tracking.tags are tags (a
    secret-looking one masked), not params; the source, commit and user tags MLflow's UI shows come from the run
    directory's provenance; the run starts when its first command started."""
    import time

    from skillopt_ray.runs.rundir import RunDir

    rd = RunDir(tmp_path / "rd")
    rd.root.mkdir()
    rd.write_provenance(
        {
            "entry_point": "python -m skillopt_ray",
            "command_line": "python -m skillopt_ray +experiment=alfworld",
            "user": "ana",
            "version": "0.1.0",
            "code_hash": "abc123",
            "git": {"commit": "f" * 40, "branch": "main", "dirty": True},
        }
    )
    started = int(time.time()) - 50
    rd.write_sessions([{"started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)), "wall_s": 50.0}])
    tr = _tracker(tmp_path, store_template)
    tags = {"run_dir": str(rd.root), "owner": "bo", "hf_token": "hf-live-secret-123"}
    run_id = tr.start({}, "r", tags, lambda rec: None)
    tr.log_params({"optimizer": {"learning_rate": 4}, "tracking": {"tags": {"owner": "bo", "hf_token": "x"}}})
    tr.log_metrics({"selection_score": 0.25}, 0)
    tr.log_metrics({"current_score": 0.5}, 1)
    tr.finish("FINISHED")
    run = tr.client.get_run(run_id)
    assert [(m.step, m.value) for m in tr.client.get_metric_history(run_id, "score/current_score")] == [
        (0, 0.25),
        (1, 0.5),
    ]
    assert set(run.data.params) == {"optimizer.learning_rate"}
    assert run.data.tags["owner"] == "bo" and run.data.tags["hf_token"] == "***"
    assert "hf-live-secret-123" not in json.dumps(run.data.tags)
    t = run.data.tags
    assert t["mlflow.source.name"] == "python -m skillopt_ray" and t["mlflow.source.type"] == "LOCAL"
    assert t["mlflow.source.git.commit"] == "f" * 40 and t["mlflow.source.git.branch"] == "main"
    assert t["mlflow.user"] == "ana" and t["skillopt.git_dirty"] == "true" and t["skillopt.code_hash"] == "abc123"
    # Duration is the run's, from its first command's start, not from when MLflow was opened
    assert run.info.start_time == started * 1000 and run.info.end_time - run.info.start_time >= 50_000
