"""MLflow tracking with an explicit run id (safe from actors and threads).

Default store: sqlite under the output directory, so no server is needed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional


def default_tracking_uri(output_dir: str | Path) -> str:
    return f"sqlite:///{Path(output_dir).resolve() / 'mlflow.db'}"


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = str(v)[:500]
    return out


class Tracker:
    """Logs one training run. A disabled tracker accepts every call and does nothing."""

    def __init__(self, enabled: bool, tracking_uri: Optional[str], experiment: str, artifact_root: Path):
        self.enabled = enabled
        self.run_id: Optional[str] = None
        if not enabled:
            return
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        from mlflow.tracking import MlflowClient

        self.uri = tracking_uri
        self.client = MlflowClient(tracking_uri=tracking_uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            artifact_root.mkdir(parents=True, exist_ok=True)
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=artifact_root.resolve().as_uri())
        else:
            self.experiment_id = exp.experiment_id

    def start(self, existing_run_id: Optional[str], run_name: str, tags: dict[str, str]) -> Optional[str]:
        if not self.enabled:
            return None
        if existing_run_id:
            try:
                run = self.client.get_run(existing_run_id)
                self.run_id = run.info.run_id
                self.client.update_run(self.run_id, status="RUNNING")
                return self.run_id
            except Exception:  # noqa: BLE001 - store was wiped: start a new run
                pass
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags)
        self.run_id = run.info.run_id
        return self.run_id

    def log_params(self, params: dict[str, Any]) -> None:
        if not self.enabled:
            return
        from mlflow.entities import Param

        flat = flatten(params)
        existing = self.client.get_run(self.run_id).data.params
        todo = [Param(k, v) for k, v in flat.items() if k not in existing]
        for i in range(0, len(todo), 100):
            self.client.log_batch(self.run_id, params=todo[i : i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        ms = [Metric(k, float(v), ts, step) for k, v in metrics.items() if v is not None]
        if ms:
            self.client.log_batch(self.run_id, metrics=ms)

    def log_artifact(self, path: str | Path, artifact_path: Optional[str] = None) -> None:
        if self.enabled:
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def set_tags(self, tags: dict[str, str]) -> None:
        if self.enabled:
            for k, v in tags.items():
                self.client.set_tag(self.run_id, k, v)

    def finish(self, status: str = "FINISHED") -> None:
        if self.enabled and self.run_id:
            self.client.set_terminated(self.run_id, status=status)
