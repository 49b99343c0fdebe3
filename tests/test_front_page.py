"""What a user reads first: the lines a run ends with, the report's wording, the README as a front page (its
length, its first commands, links that resolve) and the docs site (the generated configuration page is current)."""

from __future__ import annotations

from skillopt_ray.cli.report import mlflow_lines, report
from skillopt_ray.report import lr_text


def _outcome(uri: str) -> dict:
    summary = {
        "mode": "eval",
        "split": "test",
        "eval": {"hard": 0.5, "soft": 0.5, "n": 2, "infra_errors": 0, "per_type": {}},
    }
    ml = {"run_id": "abc123", "experiment_id": "7", "tracking_uri": uri}
    return {"status": "ok", "summary": summary, "run_dir": "/tmp/run", "mlflow": ml, "timing": None}


def test_a_run_ends_with_each_mlflow_line_once_and_the_light_server_command(capsys):
    assert report(_outcome("sqlite:////tmp/out/mlflow.db")) == 0
    out = capsys.readouterr().out
    assert out.count("view with") == 1 and out.count("mlflow run: abc123") == 1
    assert out.count("all runs of the experiment") == 1 and "mlflow ui" not in out
    assert (
        "  view with: mlflow server --backend-store-uri sqlite:////tmp/out/mlflow.db --host 127.0.0.1 --port 5000 "
        "--workers 1, then open http://127.0.0.1:5000/#/experiments/7/runs/abc123?workflowType=machine_learning"
    ) in out
    # a run tracked by a server is viewed on that server: no command to start one, links to it
    lines = mlflow_lines({"run_id": "r", "experiment_id": "3", "tracking_uri": "http://mlflow.lab:5000/"})
    assert "mlflow server" not in "\n".join(lines)
    assert lines[1].endswith("http://mlflow.lab:5000/#/experiments/3/runs/r?workflowType=machine_learning")
    assert lines[2].endswith("http://mlflow.lab:5000/#/experiments/3/runs?workflowType=machine_learning")


def test_the_learning_rate_is_said_as_the_schedule_makes_it():
    assert lr_text({"learning_rate": 4, "min_learning_rate": 2, "lr_schedule": "constant"}) == (
        "learning rate 4 every step (constant)"
    )
    assert lr_text({"learning_rate": 4, "min_learning_rate": 2, "lr_schedule": "cosine"}) == (
        "learning rate 4 decaying to 2 (cosine)"
    )
    assert "unlimited" in lr_text({"learning_rate": 4, "min_learning_rate": 2, "lr_schedule": "autonomous"})
    chosen = lr_text({"learning_rate": 4, "lr_schedule": "cosine", "lr_control_mode": "autonomous"})
    assert "chosen by the optimizer" in chosen and "->" not in chosen
