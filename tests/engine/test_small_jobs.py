"""A small chat eval through the command starts one env actor, not the configured pool, and loses no concurrency."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from bench_small_eval import eval_command, reply, write_tasks  # noqa: E402

pytestmark = pytest.mark.slow


def _actors(trace: Path) -> dict[str, set[str]]:
    """Processes (pids) that wrote each start-up mark."""
    seen: dict[str, set[str]] = {}
    for line in trace.read_text().splitlines():
        label, _t, pid = line.split()
        seen.setdefault(label, set()).add(pid)
    return seen


def test_a_chat_eval_runs_all_its_slots_on_one_env_actor(tmp_path):
    tasks = write_tasks(tmp_path / "data", 24)
    trace = tmp_path / "trace.txt"
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        SKILLOPT_STARTUP_TRACE=str(trace),
        SKILLOPT_CLUSTER_HOME=str(tmp_path / "no-kept-cluster"),  # a private cluster, whatever is kept up here
    )
    env.pop("RAY_ADDRESS", None)
    with ScriptedServer(policy=reply, latency_s=1.0) as srv:
        cmd = eval_command(tasks, srv.base_url, tmp_path / "out", 12)
        cmd += ["ray.env_actors=3", "ray.episodes_per_actor=4", "ray.mode=cluster"]  # 12 slots, as 3 actors x 4 give
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        peak = srv.state.peak_in_flight
    marks = _actors(trace)
    assert len(marks["env-actor-started"]) == 1, marks  # one env actor process, no warm-up of others
    assert peak == 12, peak  # every slot in flight at once: the same concurrency as the configured pool
    [summary] = list((tmp_path / "out" / "runs").glob("*/summary.json"))
    assert json.loads(summary.read_text())["eval"]["hard"] == 1.0  # every item reached its own episode
