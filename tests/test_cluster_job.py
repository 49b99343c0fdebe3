"""`ray job submit` for real: a private local head on loopback, the documented submit script, a small experiment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def _free_ports(n: int) -> list[int]:
    from skillopt_ray.llm.embedded import free_port

    return [free_port() for _ in range(n)]


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line), read from /proc."""
    table = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        table[int(d.name)] = (ppid, cmd)
    return table


def head_pids(temp_dir: str) -> set[int]:
    """Our head's processes (their command lines name its private temp dir) and all their descendants."""
    table = _proc_table()
    me, mine = os.getpid(), set()
    while me in table and me not in mine:  # never ourselves or our ancestors (a shell may quote the path)
        mine.add(me)
        me = table[me][0]
    pids = {pid for pid, (_, cmd) in table.items() if temp_dir in cmd and pid not in mine}
    grew = True
    while grew:
        kids = {pid for pid, (ppid, _) in table.items() if ppid in pids} - pids
        pids |= kids
        grew = bool(kids)
    return pids - mine


def stop_by_pids(temp_dir: str) -> None:
    """Stop exactly the processes of our head. Never `ray stop`, which kills every Ray process on the machine."""
    pids = head_pids(temp_dir)
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and (pids & set(_proc_table())):
            time.sleep(0.2)
        pids &= set(_proc_table())
        if not pids:
            return


def wait_for_job_api(address: str, timeout_s: float = 90.0) -> None:
    """The dashboard answers before its job agent is ready: submit a no-op job until one succeeds."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client = JobSubmissionClient(address)
            job = client.submit_job(entrypoint="true")
            while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
                time.sleep(0.5)
            break
        except Exception:  # noqa: BLE001 - not ready yet
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
    # leave the job list to the test: the supervisor may write the record once more after SUCCEEDED
    gone_since = None
    while gone_since is None or time.monotonic() - gone_since < 3.0:
        if job in {j.submission_id for j in client.list_jobs()}:
            client.delete_job(job)
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        time.sleep(0.5)


@pytest.fixture()
def local_head():
    temp_dir = tempfile.mkdtemp(prefix="rh.", dir="/tmp")  # short: Ray's socket paths have a length limit
    # every port chosen free: Ray's default agent ports clash with other clusters on a busy machine
    gcs, dash, client, agent_http, agent_grpc, runtime_env, metrics = _free_ports(7)
    env = dict(
        os.environ,
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    )
    ray_bin = str(Path(sys.executable).parent / "ray")
    subprocess.run(
        [
            ray_bin,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={gcs}",
            f"--dashboard-port={dash}",
            "--dashboard-host=127.0.0.1",
            f"--ray-client-server-port={client}",
            f"--temp-dir={temp_dir}",
            "--num-cpus=2",
            "--include-dashboard=true",
            "--disable-usage-stats",
            f"--dashboard-agent-listen-port={agent_http}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--metrics-export-port={metrics}",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        wait_for_job_api(f"http://127.0.0.1:{dash}")
        yield env, f"http://127.0.0.1:{dash}"
    finally:
        stop_by_pids(temp_dir)
        assert not head_pids(temp_dir)


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
