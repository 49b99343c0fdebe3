"""The cluster kept up between runs (python -m skillopt_ray.cluster): up, status, a run attaching, down, idle stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_helpers import _cli, _env

from skillopt_ray.base.lifeline import start_ticks
from skillopt_ray.cluster import command as cluster
from skillopt_ray.runs import kept_cluster

REPO = Path(__file__).resolve().parents[2]
# what start_ray does in a run's CLI: attach when a kept cluster is up, then say where it is
ATTACH = (
    "import sys, time, ray; from skillopt_ray.cli.ray_session import start_ray; "
    "start_ray({'ray': {'address': None, 'num_cpus': None, 'object_store_memory_mb': 128}}); "
    "print(ray.get_runtime_context().gcs_address, flush=True); time.sleep(float(sys.argv[1]))"
)


def _wait_gone(pid: int, start: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if start_ticks(pid) != start:
            return True
        time.sleep(0.2)
    return False


def test_no_cluster_is_said_plainly_and_a_stale_record_is_not_attached(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path))
    assert cluster.live() is None
    (tmp_path / cluster.RECORD).write_text("{not json")
    assert cluster.read_record() is None
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = {"pid": gone.pid, "start": "1", "address": "127.0.0.1:1", "temp_dir": "/tmp/x", "started_at": 0.0}
    stale |= {"idle_s": 60.0, "num_cpus": 1, "auth_mode": "disabled"}
    (tmp_path / cluster.RECORD).write_text(json.dumps(stale))
    assert cluster.read_record() is not None and cluster.live() is None  # its holder has ended
    out = _cli(tmp_path, "status", "--json")
    assert out.returncode == 0 and "no Ray cluster kept up" in out.stderr and json.loads(out.stdout) == {}
    out = _cli(tmp_path, "down")
    assert out.returncode == 0 and "nothing to stop" in out.stderr
    assert not (tmp_path / cluster.RECORD).exists()
    bad = _cli(tmp_path, "up", "--idle-minutes", "0")
    assert bad.returncode == 2 and "not a positive number of minutes" in bad.stderr


def test_leases_last_as_long_as_their_process(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        kept_cluster.take_lease(sleeper.pid, tmp_path)
        kept_cluster.take_lease(os.getpid(), tmp_path)
        assert cluster.active_leases(tmp_path) == 2
    finally:
        sleeper.kill()
        sleeper.wait()
    assert cluster.active_leases(tmp_path) == 1  # the ended run's lease is dropped
    assert [p.name for p in (tmp_path / "leases").iterdir()] == [f"{os.getpid()}.json"]


@pytest.mark.slow
def test_a_run_attaches_to_the_kept_cluster_and_down_stops_it(tmp_path):
    out = _cli(tmp_path, "up", "--json", "--num-cpus", "1", "--object-store-mb", "128")
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    try:
        assert "python -m skillopt_ray.cluster down" in out.stderr
        again = _cli(tmp_path, "up", "--json")
        assert again.returncode == 0 and "already up" in again.stderr
        assert json.loads(again.stdout)["pid"] == rec["pid"]  # one cluster, not two
        run = subprocess.run(
            [sys.executable, "-c", ATTACH, "0"], env=_env(tmp_path), capture_output=True, text=True, timeout=240
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == rec["address"]  # joined the kept cluster, started none
        assert f"attached to the Ray cluster kept up by pid {rec['pid']}" in run.stderr
        status = _cli(tmp_path, "status", "--json")
        assert json.loads(status.stdout)["pid"] == rec["pid"] and "stops after" in status.stderr
    finally:
        down = _cli(tmp_path, "down")
    assert down.returncode == 0 and f"stopped the Ray cluster kept up by pid {rec['pid']}" in down.stderr
    assert _wait_gone(rec["pid"], rec["start"], 30)
    assert not (tmp_path / cluster.RECORD).exists()
    sessions = [d.name for d in Path(rec["temp_dir"]).glob(f"session_*_{rec['pid']}")]  # Ray names it by its pid
    assert sessions
    assert not [p for p in _processes() if sessions[0] in p], "Ray processes of the stopped cluster are still running"


def _processes() -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            out.append((d / "cmdline").read_bytes().decode(errors="replace")) if d.name.isdigit() else None
        except OSError:
            continue
    return out


@pytest.mark.slow
def test_the_kept_cluster_stops_itself_once_no_run_has_used_it_for_its_idle_time(tmp_path):
    out = _cli(tmp_path, "up", "--json", "--num-cpus", "1", "--object-store-mb", "128", "--idle-minutes", "0.1")
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    try:
        # a run attached for longer than the idle time keeps it up
        run = subprocess.Popen(
            [sys.executable, "-c", ATTACH, "15"], env=_env(tmp_path), stdout=subprocess.PIPE, text=True
        )
        assert run.stdout is not None and run.stdout.readline().strip() == rec["address"]
        time.sleep(9)
        assert start_ticks(rec["pid"]) == rec["start"], "stopped while a run was attached"
        run.wait(timeout=120)
        assert _wait_gone(rec["pid"], rec["start"], 90), "still up long after its idle time"
        assert not (tmp_path / cluster.RECORD).exists()
    finally:
        _cli(tmp_path, "down")


def _record(home: Path, pid: int, address: str = "127.0.0.1:1") -> dict:
    rec = {"pid": pid, "start": start_ticks(pid), "address": address, "temp_dir": "/tmp/x", "started_at": 0.0}
    rec |= {"idle_s": 60.0, "num_cpus": 1, "auth_mode": "disabled"}
    (home / cluster.RECORD).write_text(json.dumps(rec))
    return rec


def test_a_killed_holder_not_yet_reaped_and_a_cluster_that_does_not_answer_are_not_attached(
    tmp_path, monkeypatch, capsys
):
    """A killed holder is a zombie for 1.5-2 s: a rerun then attached to its dead cluster and hung for minutes."""
    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _record(tmp_path, holder.pid)
        assert cluster.live() is not None
        holder.kill()
        deadline = time.monotonic() + 5
        while Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert cluster.live() is None  # exited, not yet reaped: gone
    finally:
        holder.wait()
    from skillopt_ray.cli.ray_session import attach_kept_cluster

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _record(tmp_path, sleeper.pid, "127.0.0.1:9")  # its holder runs, its cluster does not answer
        assert attach_kept_cluster() is False
        assert f"the Ray cluster kept up by pid {sleeper.pid} does not answer" in capsys.readouterr().err
    finally:
        sleeper.kill()
        sleeper.wait()


def test_down_names_the_runs_it_would_end_and_stops_only_with_force(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # stands for the holder
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "my-run"])
    try:
        rec = _record(tmp_path, holder.pid)
        kept_cluster.take_lease(run.pid, tmp_path)
        out = _cli(tmp_path, "down")
        assert out.returncode == 2 and holder.poll() is None, out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith("error: the kept cluster is running 1 run(s)") and f"pid {run.pid}" in line
        assert "my-run" in line and "down --force" in line
        out = _cli(tmp_path, "down", "--force")
        assert out.returncode == 0 and f"ends 1 run(s): pid {run.pid}" in out.stderr
        assert holder.wait(timeout=10) is not None and _wait_gone(rec["pid"], rec["start"], 5)
    finally:
        for p in (holder, run):
            p.kill()
            p.wait()
