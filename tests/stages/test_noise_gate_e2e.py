"""Repeated rollouts and the paired gate end to end: a 3-epoch scripted ALFWorld run with
optimizer.rollouts_per_task=3 and optimizer.gate_test=paired_bootstrap, SIGKILLed mid-run and rerun, ends exactly
as the uninterrupted run and pays no call twice (the endpoint answers each repeat's calls once, over all commands).

The kill machinery (a server that holds its answers at the kill point, the kill, the check that the run's actors
are gone) is tests/cli/test_kill_cli.py's. The commands run a frozen copy of the code: a run's identity includes a hash of
the code, so an edit to the working tree between the kill and the rerun would otherwise start a new run.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kill_helpers import REPO, HoldingServer, _after_kill, _cache, _comparable, _decisions, _kill_when, _ledger
from scripted_server import Policies

pytestmark = pytest.mark.slow
REPEATS = 3


def _frozen_code(dest: Path) -> Path:
    """The package, the benchmarks (as skillopt_envs) and the configs as they are now, for every command."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "skillopt_ray", dest / "skillopt_ray", ignore=skip)
    shutil.copytree(REPO / "envs", dest / "skillopt_envs", ignore=skip)
    shutil.copytree(REPO / "conf", dest / "conf", ignore=skip)
    return dest


def _cli(url: str, root: Path, cwd: Path, out: Path) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        "skillopt_ray",
        "+experiment=alfworld",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"env.data_dir={root}",
        f"output_dir={out}",
        "debug.progress=off",
        "env.options.skip_missing_games=true",
        "env.max_turns=8",
        "env.limit_train=4",
        "env.limit_selection=4",
        "env.limit_test=2",
        "optimizer.epochs=3",
        "optimizer.batch_size=4",
        "optimizer.minibatch_size=4",
        "optimizer.slow_update_samples=2",
        f"optimizer.rollouts_per_task={REPEATS}",
        "optimizer.gate_test=paired_bootstrap",
        "ray.episodes_per_actor=4",
    ]
    code = cwd / "code"
    env = dict(os.environ, PYTHONPATH=str(code), RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    return subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finish(url: str, root: Path, cwd: Path, out: Path, resumed: bool) -> Path:
    p = _cli(url, root, cwd, out)
    stdout, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    assert ("resuming run" in err) == resumed, err[-2000:]
    return Path(stdout.split("run directory: ")[-1].splitlines()[0])


def _target_keys(srv: HoldingServer) -> int:
    return sum(n for (role, _), n in srv.state.requests.items() if role == "target")


def test_repeated_rollouts_and_the_paired_gate_resume_after_a_kill_exactly(walkthroughs, alfworld_root, tmp_path):
    seed = int(os.environ.get("SKILLOPT_KILL_SEED", "24"))
    rng = random.Random(seed)
    _frozen_code(tmp_path / "code")
    with HoldingServer(Policies(walkthroughs, "rule_gated")) as srv:
        ref_dir = _finish(srv.base_url, alfworld_root, tmp_path, tmp_path / "ref", resumed=False)
        ref_served, total = srv.served(), srv.answered
        assert _ledger(ref_dir) == ref_served

        srv.reset()
        out = tmp_path / "out"
        n = rng.randrange(total // 4, 3 * total // 4)  # somewhere in the training steps
        srv.hold_at = n
        p = _cli(srv.base_url, alfworld_root, tmp_path, out)
        actors: set[int] = set()
        killed_at = _kill_when(p, lambda: srv.mode == "hold", f"{n} answers", rng.uniform(0.2, 0.8), actors)
        assert srv.answered == n
        print(f"SKILLOPT_KILL_SEED={seed}: reference {total} calls, killed after {n} ({srv.last_answered})")
        _after_kill(srv, actors, killed_at)
        states = list(out.glob("runs/*/state.json"))
        assert states, (
            f"the killed run left no state to resume: {sorted(str(f.relative_to(out)) for f in out.rglob('*'))[:40]}"
        )
        run_dir = _finish(srv.base_url, alfworld_root, tmp_path, out, resumed=True)
        served = srv.served()

    # the same decisions, scores and intervals as the uninterrupted run, and no call paid twice
    assert _decisions(run_dir) == _decisions(ref_dir)
    summary, ref = (json.loads((d / "summary.json").read_text()) for d in (run_dir, ref_dir))
    for k in ("selection", "test", "versions", "intervals", "rollouts_per_task"):
        assert summary[k] == ref[k], k
    assert served == ref_served and _ledger(run_dir) == served
    got, want = _comparable(run_dir), _comparable(ref_dir)
    assert sorted(got) == sorted(want)
    assert [f for f in want if got[f] != want[f]] == []
    assert _cache(run_dir) == _cache(ref_dir)

    # what the repeats and the paired gate wrote
    assert ref["rollouts_per_task"] == REPEATS
    assert ref["test"]["best"]["n"] == REPEATS * 2 and ref["intervals"]["test"]["best"]["hard"]["n"] == 2
    scores = [json.loads(line) for line in (ref_dir / "scores.jsonl").read_text().splitlines()]
    for s in scores:
        ev = s["eval"]
        assert ev["repeats"] == REPEATS and ev["n"] == REPEATS * len(ev["tasks"])
        for t, reps in ev["task_repeats"].items():  # a task's score is the mean of its repeats
            assert len(reps) == REPEATS and ev["tasks"][t][0] == pytest.approx(sum(r[0] for r in reps) / REPEATS)
    gates = [json.loads(g.read_text()) for g in sorted(ref_dir.glob("steps/*/gate.json"))]
    tested = [g for g in gates if "gate_test" in g]
    assert tested, "no step reached the paired gate"
    for g in tested:
        t = g["gate_test"]
        assert t["test"] == "paired_bootstrap" and t["n"] == g["tasks_compared"]
        assert t["lo"] <= t["mean_diff"] <= t["hi"]
        assert (g["action"] in ("accept", "accept_new_best")) == (
            t["significant"] and g["candidate_score"] > g["current_score"]
        )
    for f in sorted(ref_dir.glob("epochs/*/slow_result.json")):  # a gated slow update carries the test too
        slow = json.loads(f.read_text())
        if slow.get("eval_key") and slow["action"] in ("accept", "accept_new_best", "reject"):
            assert slow["gate_test"]["test"] == "paired_bootstrap", f
    # the report and MLflow show the test and the intervals
    from mlflow.tracking import MlflowClient

    from skillopt_ray.runs import report

    text = report.story_text(report.load(ref_dir))
    assert "paired test (paired_bootstrap, alpha 0.05): difference" in text and "95% intervals over tasks" in text
    assert f"episodes ({REPEATS} per task)" in text  # a step's rollout count is episodes, not tasks
    ml = json.loads((ref_dir / "mlflow_run.json").read_text())
    metrics = MlflowClient(ml["tracking_uri"]).get_run(ml["run_id"]).data.metrics
    assert {"score/test_hard_best_ci_lo", "score/best_selection_ci_hi", "gate/gate_p_value"} <= set(metrics)
    # every repeat was its own call: train, selection and test keys carry /r1 and /r2 beside the plain one
    rollout = json.loads(next(iter(sorted(ref_dir.glob("steps/*/rollout.json")))).read_text())
    assert len(rollout) == REPEATS * 4 and [r["info"]["repeat"] for r in rollout[:REPEATS]] == [1, 2, 3]
