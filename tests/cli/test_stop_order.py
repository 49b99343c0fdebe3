"""Ctrl-C in the middle of a run: the command ends its driver before the gateway, so the driver never sees its
model calls fail and never ends the MLflow run FAILED; the run is left RUNNING for its resume (a dashboard's Stop
then marks it KILLED)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from conftest import qa_fixture
from kill_helpers import _cli
from scripted_server import Policies, ScriptedServer


def _wait_for(cond, timeout_s: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"the command ended ({proc.returncode}) before {what}: {proc.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.1)


@pytest.mark.slow
def test_ctrl_c_mid_call_leaves_the_mlflow_run_for_its_resume_not_failed(tmp_path):
    from mlflow.tracking import MlflowClient

    answers = qa_fixture(tmp_path / "qa")
    out = tmp_path / "out"
    with ScriptedServer(Policies(target="rule_gated", answers=answers), latency_s=2.0) as srv:
        proc = _cli(srv.base_url, tmp_path, out)  # the kill tests' command: SearchQA on the fixture, calls in flight
        try:
            records = lambda: list(out.glob("runs/*/mlflow_run.json"))  # noqa: E731
            _wait_for(lambda: records() and srv.state.in_flight > 0, 240, "MLflow run with a call in flight", proc)
            time.sleep(0.3)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 3 and "rerun the same command to resume" in err, err[-2000:]
    record = json.loads(records()[0].read_text())
    status = MlflowClient(tracking_uri=record["tracking_uri"]).get_run(record["run_id"]).info.status
    assert status == "RUNNING", (status, err[-2000:])
