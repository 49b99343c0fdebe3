"""A finished one-process run's command run again makes no model call: its MLflow run must still be opened and
marked ended without waiting for a first model call that cannot come (it waited out FIRST_CALL_WAIT_S, 10 s)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from helpers import checked
from scripted_server import Policies, ScriptedServer

from skillopt_ray import cli
from skillopt_ray.engine import driver


def _tasks(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {"id": f"{split}{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i), "split": split}
        for split in ("train", "selection", "test")
        for i in range(2)
    ]
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.timeout(300)  # a guard only: without the fix the second command waits for a model call forever here
def test_a_finished_local_runs_command_again_opens_its_tracker_without_a_model_call(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path / "no-kept-cluster"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    tasks = _tasks(tmp_path / "data")
    with ScriptedServer(Policies(target="nonsense")) as srv:
        data = cli.plain(
            cli.compose(
                [
                    "+experiment=custom",
                    "+smoke=tiny",
                    f"env.data_dir={tasks}",
                    "llm=compatible",
                    f"llm.base_url={srv.base_url}",
                    f"output_dir={tmp_path / 'out'}",
                    "debug.progress=off",
                    "ray.mode=local",
                ]
            )
        )
        data = cli.resolve_paths(data)
        assert cli.run_one(checked(data)) == 0
        calls = len(srv.state.request_times)
        assert calls > 0
        # a wait for a model call would never end
        monkeypatch.setattr(driver, "TrackerWhenReady", functools.partial(driver.TrackerWhenReady, wait_s=None))
        assert cli.run_one(checked(data)) == 0
        assert len(srv.state.request_times) == calls  # the finished run made no model call
    from mlflow.tracking import MlflowClient

    ml = json.loads((cli.run_dir_for(data) / "mlflow_run.json").read_text())
    assert MlflowClient(ml["tracking_uri"]).get_run(ml["run_id"]).info.status == "FINISHED"
