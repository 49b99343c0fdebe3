"""Sweeps on Ray Tune with MLflow parent/child runs, the comparison report, resume, and the MLflow UI served for real."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from scipy import stats

from skillopt_ray import compare, sweep
from skillopt_ray.cli import UsageError
from skillopt_ray.testing.scripted_server import Policies, ScriptedServer

from conftest import qa_fixture


def test_presets_combine_with_seeds_and_command_line_params():
    spec, rest = sweep.parse_args(["+experiment=alfworld", "+sweep=[lr,gate]", "seeds=3", "sweep.max_concurrent=2", "llm=openai"])
    assert spec.grid == {"optimizer.learning_rate": [2, 4, 6], "optimizer.gate_metric": ["hard", "soft", "mixed"]}
    assert spec.seeds == [0, 1, 2] and spec.max_concurrent == 2 and rest == ["+experiment=alfworld", "llm=openai"]
    spec, _ = sweep.parse_args(["+sweep=gate_mixed_weight", "seeds=[7,9]", "sweep.params.optimizer.batch_size=[8]"])
    assert spec.fixed == {"optimizer.gate_metric": "mixed"} and spec.seeds == [7, 9] and spec.grid["optimizer.batch_size"] == [8]
    with pytest.raises(UsageError, match="unknown sweep preset 'nope'.*available: batch"):
        sweep.parse_args(["+sweep=nope"])
    with pytest.raises(UsageError, match="nothing to sweep"):
        sweep.parse_args(["+experiment=alfworld"])
    with pytest.raises(UsageError, match="seeds must be"):
        sweep.parse_args(["+sweep=lr", "seeds=zero"])


def test_trial_resources_and_concurrency_follow_cpus_and_the_endpoint():
    data = {"ray": {"env_actors": 4, "episodes_per_actor": 4, "actor_num_cpus": 0.0},
            "llm": {"target": {"max_concurrency": 32, "requests_per_minute": 0}}}
    assert sweep.trial_cpus(data) == 1.0
    assert sweep.max_concurrent_trials(data, 16, None) == 2  # the endpoint takes 32 calls; each trial keeps 16 in flight
    data["llm"]["target"]["max_concurrency"] = 256
    assert sweep.max_concurrent_trials(data, 2, None) == 2  # now the 2 CPUs bind
    assert sweep.max_concurrent_trials(data, 16, 3) == 3


def test_statistics_match_hand_computed_values():
    st = compare.summarize([1.0, 2.0, 3.0])
    assert st["mean"] == 2.0 and st["std"] == 1.0
    assert st["ci_hi"] - 2.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert math.isnan(compare.summarize([5.0])["std"])
    recs = [compare.Record({"lr": lr}, seed, {"test_hard_best": v}) for lr, seed, v in
            [("4", 0, 0.5), ("4", 1, 0.6), ("6", 0, 0.7), ("6", 1, 0.9)]]
    (p,) = compare.Comparison(recs, ["lr"]).paired({"lr": "4"})
    assert p["lr"] == "6" and p["pairs"] == 2 and p["diff_mean"] == pytest.approx(0.25)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_sweep_resumes_logs_parent_and_children_and_compares(ray_cluster, tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        args = ["+experiment=searchqa", "+smoke=tiny", "llm=compatible", f"llm.base_url={srv.base_url}", f"output_dir={tmp_path / 'out'}",
                f"env.data_dir={tmp_path / 'qa'}", "env.options.split_source=folders", "+sweep=lr", "sweep.params.optimizer.learning_rate=[2,4]", "seeds=2",
                "sweep.max_concurrent=1"]
        assert sweep.main(args + ["sweep.interrupt_after=1"]) == 3  # stopped: rerun to resume
        (sdir,) = (tmp_path / "out" / "sweeps").iterdir()
        meta = json.loads((sdir / "sweep.json").read_text())
        done = [Path(t["run_dir"]) for t in meta["trials"] if (Path(t["run_dir"]) / "summary.json").exists()]
        assert len(done) == 1
        stamp = (done[0] / "summary.json").stat().st_mtime_ns
        calls_before = srv.state.attempts
        assert sweep.main(args) == 0
        assert (done[0] / "summary.json").stat().st_mtime_ns == stamp  # the finished trial was not rerun
        assert srv.state.attempts > calls_before
    meta = json.loads((sdir / "sweep.json").read_text())
    assert len(meta["trials"]) == 4 and all((Path(t["run_dir"]) / "summary.json").exists() for t in meta["trials"])

    # MLflow: one parent, four children tagged with their swept value and seed, each with skill artifacts
    from mlflow.tracking import MlflowClient

    client = MlflowClient(meta["tracking_uri"])
    parent = client.get_run(meta["parent_run_id"])
    assert parent.info.status == "FINISHED" and json.loads(parent.data.tags["best_config"])
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 4
    assert sorted((c.data.tags["sweep.param.optimizer.learning_rate"], c.data.tags["seed"]) for c in children) == \
        [("2", "42"), ("2", "43"), ("4", "42"), ("4", "43")]
    for c in children:
        assert c.info.status == "FINISHED"
        assert "skill_v0000.md" in {Path(a.path).name for a in client.list_artifacts(c.info.run_id, "skills")}
        assert len(client.get_metric_history(c.info.run_id, "current_score")) == 2
    assert {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "comparison")} >= \
        {"comparison.md", "comparison.csv", "learning_curves.png", "accept_rate.png"}

    # the compare command over the MLflow sweep, checked against values computed here from the child runs
    out = tmp_path / "cmp"
    assert compare.main(["--sweep-dir", str(sdir), "--baseline", "optimizer.learning_rate=2", "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "comparison.csv")))
    assert [(r["optimizer.learning_rate"], r["n"]) for r in rows] == [("2", "2"), ("4", "2")]
    for r in rows:
        mine = [c for c in children if c.data.tags["sweep.param.optimizer.learning_rate"] == r["optimizer.learning_rate"]]
        for metric, mlflow_name in (("tokens", "tokens_total"), ("test_hard_best", "test_hard_best")):
            vals = [c.data.metrics[mlflow_name] for c in mine]
            mean, sd = statistics.mean(vals), statistics.stdev(vals)
            half = stats.t.ppf(0.975, len(vals) - 1) * sd / math.sqrt(len(vals))
            assert float(r[f"{metric}_mean"]) == pytest.approx(mean)
            assert float(r[f"{metric}_std"]) == pytest.approx(sd)
            assert float(r[f"{metric}_ci_lo"]) == pytest.approx(mean - half) and float(r[f"{metric}_ci_hi"]) == pytest.approx(mean + half)
    paired = list(csv.DictReader(open(out / "paired.csv")))
    assert len(paired) == 1 and paired[0]["pairs"] == "2"
    for png in ("learning_curves.png", "accept_rate.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert "| optimizer.learning_rate | n | test hard |" in (out / "comparison.md").read_text()

    # the MLflow UI, served for real on loopback: the page, the REST API and a skill artifact
    port = _free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", meta["tracking_uri"],
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                page = urllib.request.urlopen(base + "/", timeout=5).read().decode()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        assert "<html" in page.lower() and "mlflow" in page.lower()
        exp_id = parent.info.experiment_id
        req = urllib.request.Request(base + "/api/2.0/mlflow/runs/search", data=json.dumps({"experiment_ids": [exp_id]}).encode(),
                                     headers={"Content-Type": "application/json"})
        runs = json.loads(urllib.request.urlopen(req, timeout=10).read())["runs"]
        assert len(runs) == 5  # the parent and its four trials
        child = children[0].info.run_id
        skill = urllib.request.urlopen(f"{base}/get-artifact?path=best_skill.md&run_uuid={child}", timeout=10).read().decode()
        run_dir = Path(children[0].data.tags["run_dir"])
        assert skill == (run_dir / "best_skill.md").read_text()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_trials_share_one_embedded_server_when_their_settings_agree():
    from skillopt_ray.sweep import shared_embedded_settings

    def trial(provider="embedded", ctx=8192, url=None, cache_mode="record"):
        emb = {"model_path": None, "ctx_size": ctx, "threads": 2, "parallel": 2, "startup_timeout_s": 120.0, "server_url": url}
        return {"llm": {"target": {"provider": provider}, "optimizer": {"provider": provider}, "embedded": emb, "cache_mode": cache_mode}}

    shared = shared_embedded_settings([trial(), trial()], concurrent=3)
    assert shared == {"model_path": None, "ctx_size": 3 * 8192, "threads": 2, "parallel": 6, "startup_timeout_s": 120.0}
    assert shared_embedded_settings([trial("openai"), trial("openai")], 2) is None  # nobody needs it
    assert shared_embedded_settings([trial(cache_mode="replay")], 2) is None  # answers come from the cache
    assert shared_embedded_settings([trial(), trial(ctx=4096)], 2) is None  # settings differ: one server each
    assert shared_embedded_settings([trial(url="http://127.0.0.1:9/v1")], 2) is None  # the user gave one
