"""Real SIGKILLs of the CLI: no paid call starts a second after one, and the rerun (same command) finishes.

One subprocess test (each start costs Ray and MLflow imports): a kill while the run starts
(MLflow store creation), then one in the middle of a rollout, then the run to its end."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripted_server import Policies, ScriptedServer
from skillopt_ray.tracking import store_state

from conftest import qa_fixture

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _cli(url: str, tmp_path: Path) -> subprocess.Popen:
    args = [sys.executable, "-m", "skillopt_ray", "+experiment=searchqa", "+smoke=tiny", "llm=compatible", f"llm.base_url={url}",
            f"output_dir={tmp_path / 'out'}", f"env.data_dir={tmp_path / 'qa'}", "env.options.split_source=folders", "debug.progress=off"]
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    args.append("ray.episodes_per_actor=8")  # many calls in flight at the kill
    return subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finish(url: str, tmp_path: Path) -> dict:
    p = _cli(url, tmp_path)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    assert "resuming run" in err
    assert "half-made" not in err  # the kill left no broken store behind
    run_dir = Path(out.split("run directory: ")[-1].splitlines()[0])
    ml = json.loads((run_dir / "mlflow_run.json").read_text())
    return {"summary": json.loads((run_dir / "summary.json").read_text()), "mlflow": ml, "run_dir": run_dir}


def _ppid_and_state(pid: int) -> tuple[int, str]:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, IndexError, ValueError):
        return 0, "gone"


def _run_actors(cli_pid: int) -> set[int]:
    """The run's actor processes (the driver, the LLM gateway, env actors): Ray workers below this CLI."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if not any(n in title for n in (b"ray::DriverActor", b"ray::GatewayActor", b"ray::EnvActor")):
            continue
        pid = int(entry)
        for _ in range(10):
            pid = _ppid_and_state(pid)[0]
            if pid == cli_pid:
                found.add(int(entry))
                break
            if pid <= 1:
                break
    return found


def _kill_when(p: subprocess.Popen, ready, what: str, delay_s: float = 0.0) -> float:
    """SIGKILL the CLI `delay_s` after `ready()` first holds; returns when it was killed."""
    deadline = time.monotonic() + 120
    while not ready() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    time.sleep(delay_s)
    assert p.poll() is None, f"the CLI ended before {what}: " + p.communicate()[1][-2000:]
    p.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    p.wait()
    return killed_at


def test_sigkill_at_start_and_mid_rollout_then_the_rerun_finishes_and_no_paid_call_follows_a_kill(tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    rng = random.Random(int(os.environ.get("SKILLOPT_KILL_SEED", "14")))
    out = tmp_path / "out"
    with ScriptedServer(Policies(target="rule_gated", answers=answers), latency_s=0.3) as srv:
        # 1. somewhere inside the first start's MLflow store creation (about 2 s of it)
        p = _cli(srv.base_url, tmp_path)
        _kill_when(p, lambda: bool(list(out.glob(".mlflow.db.building-*"))), "the MLflow store was made", rng.uniform(0.0, 1.5))
        assert not (out / "mlflow.db").exists() or store_state(out / "mlflow.db")[0] == "ok"
        # 2. the rerun starts from a whole store (or makes one); killed once paid calls are flowing
        p = _cli(srv.base_url, tmp_path)
        actors: set[int] = set()

        def calls_flowing() -> bool:
            actors.update(_run_actors(p.pid))
            return srv.state.attempts >= 6

        killed_at = _kill_when(p, calls_flowing, "six model calls")
        assert len(actors) >= 3, actors
        time.sleep(max(0.0, killed_at + 1.0 - time.monotonic()))
        lingering = [a for a in actors if _ppid_and_state(a)[1] not in ("gone", "Z")]  # a zombie has exited
        assert not lingering, f"{len(lingering)} of the run's {len(actors)} actors still run 1 s after the kill"
        time.sleep(4)  # Ray's own clean-up of a dead driver takes 2-5 s: look past it for late requests
        late = [t - killed_at for t in list(srv.state.request_times) if t > killed_at + 1.0]
        assert not late, f"{len(late)} requests arrived more than 1 s after the kill (last {max(late):.1f} s after)"
        # 3. the same command again finishes the run
        done = _finish(srv.base_url, tmp_path)
    assert done["summary"]["steps"] >= 1 and done["mlflow"]["run_id"]
