"""`ray job submit` for real: a private local head on loopback, the documented submit script, a small experiment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_helpers import _proc_table, head_pids, stop_by_pids

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_submit_job_runs_and_a_resubmitted_job_resumes_its_run(local_head, scripted, alfworld_root, tmp_path):
    env, dashboard = local_head
    env = dict(env, RAY_ADDRESS=dashboard)
    out = tmp_path / "out"
    overrides = [
        "+experiment=alfworld",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={scripted.base_url}",
        f"env.data_dir={alfworld_root}",
        "env.options.skip_missing_games=true",
        f"output_dir={out}",
        "env.max_turns=10",
    ]
    cmd = ["bash", str(REPO / "scripts" / "submit_job.sh"), *overrides]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "succeeded" in (first.stdout + first.stderr)
    assert "Overriding runtime_env" not in first.stdout + first.stderr  # one working directory, said once
    from ray.job_submission import JobSubmissionClient

    # the script's readiness check leaves no no-op job behind: the job list holds the run only
    assert [j.submission_id for j in JobSubmissionClient(dashboard).list_jobs()] == [
        json.loads((next((out / "runs").iterdir()) / "jobs.json").read_text())[0]["submission_id"]
    ]
    [run_dir] = list((out / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["test"]["best"]["hard"] == 1.0
    jobs = json.loads((run_dir / "jobs.json").read_text())
    assert len(jobs) == 1 and jobs[0]["submission_id"].startswith("skillopt-")
    ml = json.loads((run_dir / "mlflow_run.json").read_text())
    from mlflow.tracking import MlflowClient

    run = MlflowClient(ml["tracking_uri"]).get_run(ml["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["ray_job_submission_id"] == jobs[0]["submission_id"]

    calls = scripted.state.attempts
    time.sleep(1.1)  # a new submission id (the script stamps seconds)
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert [p.name for p in (out / "runs").iterdir()] == [run_dir.name]  # same run, resumed
    assert len(json.loads((run_dir / "jobs.json").read_text())) == 2
    assert scripted.state.attempts == calls  # finished run: nothing recomputed, no model call repeated


def test_start_head_script_and_its_stop_command_leave_no_process(tmp_path):
    """scripts/start_head.sh starts a head in a process group of its own; the stop command it prints ends every
    process of that head (the previous `kill $(pgrep -f TEMP)` line left 5 of them alive after 13 s)."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHON=sys.executable)
    started = subprocess.run(
        ["bash", str(REPO / "scripts" / "start_head.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert started.returncode == 0, started.stderr[-3000:]
    lines = started.stdout.strip().splitlines()
    assert lines[0].startswith("export RAY_ADDRESS=http://127.0.0.1:")
    stop = lines[1].split(": ", 1)[1]
    assert stop.startswith("bash /tmp/rh.") and stop.endswith("/stop.sh")
    temp_dir = stop.split()[1].rsplit("/", 1)[0]
    pgid = int(Path(temp_dir, "pgid").read_text())
    try:
        members = {pid for pid in _proc_table() if _pgid(pid) == pgid}
        assert head_pids(temp_dir) <= members and len(members) >= 5  # GCS, raylet, dashboard, agents, ...
        assert os.getpgid(0) != pgid  # not the caller's group: stopping it cannot hit the caller
        done = subprocess.run(stop.split(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "stopped" in done.stdout, done.stderr
        assert not {pid for pid in _proc_table() if _pgid(pid) == pgid} and not head_pids(temp_dir)
    finally:
        stop_by_pids(temp_dir)


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1
