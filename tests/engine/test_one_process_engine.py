"""The one-process engine (ray.mode=local|auto): which engine a job gets and why, a local run that never imports Ray,
and the same small training job run in both engines writing the same records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import checked
from scripted_server import Policies, ScriptedServer

from skillopt_ray import cli
from skillopt_ray.cli.engine_choice import LOCAL_MAX_EPISODES, choose
from skillopt_ray.cli.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from bench_small_eval import eval_command, reply, write_tasks  # noqa: E402


def _data(*overrides: str, experiment: str = "livemathematicianbench") -> dict:
    data = cli.plain(cli.compose([f"+experiment={experiment}", *overrides]))
    return data


@pytest.fixture()
def no_kept_cluster(tmp_path, monkeypatch):
    """A kept-cluster home with nothing kept up, and no address in the environment."""
    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path / "no-kept-cluster"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def _without_ray(monkeypatch):
    """choose() as a fresh command sees it: Ray not loaded (this test process may hold the session's cluster)."""
    monkeypatch.delitem(sys.modules, "ray", raising=False)


def test_auto_runs_a_small_chat_job_in_one_process_and_says_why(no_kept_cluster, monkeypatch):
    _without_ray(monkeypatch)
    got = choose(_data())
    assert got.kind == "local"
    assert got.line() == "engine: one process (auto: 16 episodes at a time, no cluster named or kept up)"


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (["ray.address=127.0.0.1:6379"], "ray.address=127.0.0.1:6379 names a cluster"),
        (["ray.gateway_shards=2"], "ray.gateway_shards=2"),
        (
            ["ray.env_actors=16", "ray.episodes_per_actor=8"],
            f"128 episodes at a time (one process takes up to {LOCAL_MAX_EPISODES})",
        ),
        (["ray.driver_node=any"], "ray.driver_node=any"),
        (["ray.mode=cluster"], "ray.mode=cluster"),
    ],
)
def test_auto_keeps_ray_where_a_job_asks_for_it(no_kept_cluster, monkeypatch, overrides, why):
    _without_ray(monkeypatch)
    got = choose(_data(*overrides))
    assert got.kind == "ray" and why in got.why, got


def test_auto_keeps_alfworld_on_ray(no_kept_cluster, monkeypatch):
    _without_ray(monkeypatch)
    got = choose(_data(experiment="alfworld"))
    assert got.line() == "engine: Ray (auto: alfworld plays faster in processes of its own)"


def test_local_mode_refuses_a_benchmark_that_needs_processes(no_kept_cluster):
    with pytest.raises(UsageError, match=r"ray.mode=local .* alfworld's episodes need processes of their own"):
        choose(_data("ray.mode=local", experiment="alfworld"))


def test_auto_joins_a_kept_cluster(tmp_path, monkeypatch):
    from skillopt_ray.runs import kept_cluster

    _without_ray(monkeypatch)
    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path))
    monkeypatch.setattr(kept_cluster, "live", lambda where=None: object())
    got = choose(_data())
    assert got.kind == "ray" and "kept up" in got.why


def test_a_command_the_kept_cluster_serves_says_so(no_kept_cluster, monkeypatch):
    """The holder has Ray started in its own process: a served command's first line said "Ray is already started in
    this process", the holder's view, where the user's command is served by the kept cluster."""
    import types

    from skillopt_ray.engine import warm

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: True))
    with warm.serve(pool=None, owner=None):  # type: ignore[arg-type]
        got = choose(_data())
    assert got.line() == "engine: Ray (auto: the kept cluster's holder runs it)"


def test_local_mode_with_an_address_is_a_one_line_error(no_kept_cluster):
    with pytest.raises(UsageError, match=r"ray.mode=local .* ray.address=10.0.0.1:6379 names a cluster"):
        choose(_data("ray.mode=local", "ray.address=10.0.0.1:6379"))


def test_a_bad_mode_is_a_one_line_error():
    with pytest.raises(UsageError, match="ray.mode='laptop': use auto"):
        _data("ray.mode=laptop")


def test_the_engine_modules_import_no_ray():
    code = (
        "import sys\n"
        "import skillopt_ray.cli.app, skillopt_ray.cli.launch, skillopt_ray.engine.local, skillopt_ray.engine.driver\n"
        "import skillopt_ray.engine.envpool, skillopt_ray.llm.gateway, skillopt_ray.engine.trainer\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_a_chat_episodes_path_to_its_first_call_imports_no_numpy_nor_the_agent_api():
    """What the first model call waits for: numpy (only the sequential gate's p-value needs it) and the agent API's
    web server (only agent targets) stay out of it."""
    code = (
        "import sys\n"
        "import skillopt_ray.cli.app, skillopt_ray.cli.launch, skillopt_ray.engine.local\n"
        "from skillopt_ray.config import LLMRoleConfig\n"
        "from skillopt_ray.llm.wire import agent_settings\n"
        "assert agent_settings(LLMRoleConfig(model='m'))['harness'] == 'chat'\n"
        "print(sorted(m for m in ('numpy', 'skillopt_ray.llm.agent_api', 'aiohttp.web') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_local_eval_never_imports_ray(tmp_path):
    tasks = write_tasks(tmp_path / "data", 12)
    env = dict(os.environ, PYTHONPATH=str(REPO), SKILLOPT_CLUSTER_HOME=str(tmp_path / "no-kept-cluster"))
    env.pop("RAY_ADDRESS", None)
    with ScriptedServer(policy=reply, latency_s=0.2) as srv:
        cmd = eval_command(tasks, srv.base_url, tmp_path / "out", 4)
        cmd[1:1] = ["-X", "importtime"]
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        calls = len(srv.state.request_times)
    assert p.returncode == 0, p.stderr[-3000:]
    assert calls == 12
    lines = p.stderr.splitlines()
    said = [line for line in lines if not line.startswith("import time:")]
    assert any(x.startswith("engine: one process (auto: ") for x in said[:3]), said[:3]  # which and why
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    assert "skillopt_ray.engine.local" in imported and "ray" not in imported
    [summary] = list((tmp_path / "out" / "runs").glob("*/summary.json"))
    assert json.loads(summary.read_text())["eval"]["hard"] == 1.0


def _livemath_job(url: str, out: Path, root: Path, mode: str) -> dict:
    data = _data(
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        "debug.progress=off",
        f"env.options.sample_dir={root}",
        "env.limit_train=8",
        "env.limit_test=6",
        f"ray.mode={mode}",
    )
    return cli.resolve_paths(data)


TIMING = ("time", "elapsed", "seconds", "duration", "wall", "_s", "eta", "started", "ended", "written_at")


def _untimed(value):
    """A record without its timings (keys that name a time or a duration), recursively."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not any(t in k for t in TIMING)}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _records(run_dir: Path, out: Path) -> dict:
    """What a run leaves that must not depend on its engine: scores, ledger, history, skills, MLflow params/metrics."""
    from mlflow.tracking import MlflowClient

    ml = json.loads((run_dir / "mlflow_run.json").read_text())
    client = MlflowClient(ml["tracking_uri"])
    run = client.get_run(ml["run_id"])
    params = {k: v.replace(str(out), "OUT") for k, v in run.data.params.items()}
    metrics = {
        k: [(m.step, m.value) for m in client.get_metric_history(ml["run_id"], k)]
        for k in sorted(run.data.metrics)
        if not any(t in k for t in TIMING)
    }
    ledger = json.loads((run_dir / "ledger.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("run_dir", None)
    return {
        "summary": _untimed(summary),
        "ledger": _untimed(ledger["totals"]),
        "history": _untimed(json.loads((run_dir / "history.json").read_text())),
        "skills": {p.name: p.read_text() for p in sorted((run_dir / "skills").glob("*.md"))},
        "best": (run_dir / "best_skill.md").read_text(),
        "params": params,
        "metrics": metrics,
    }


@pytest.mark.slow
def test_the_same_job_in_both_engines_writes_the_same_records(ray_cluster, tmp_path, monkeypatch):
    """Local, on Ray, and started local, stopped after a stage and resumed on Ray: the same records."""
    from skillopt_envs.livemathematicianbench.benchmark import LiveMathBenchmark
    from skillopt_envs.livemathematicianbench.samples import ensure_samples

    from skillopt_ray.base.exit_codes import EXIT_STOPPED

    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path / "no-kept-cluster"))
    root = ensure_samples(str(tmp_path / "samples"))
    tasks = LiveMathBenchmark({"options": {"sample_dir": str(root)}}).load_split("all")
    answers = {
        t.task_id: (t.task_type, f"<answer>{t.payload['correct_choice']['text']}</answer>", "<answer>E</answer>")
        for t in tasks
    }
    got = {}
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        for mode in ("local", "cluster"):
            data = _livemath_job(srv.base_url, tmp_path / mode, root, mode)
            assert cli.run_one(checked(data)) == 0
            got[mode] = _records(cli.run_dir_for(data), tmp_path / mode)
        stopped = _livemath_job(srv.base_url, tmp_path / "resumed", root, "local")
        stopped["debug"]["interrupt_after"] = "e1s1:reflect"
        assert cli.run_one(checked(stopped)) == EXIT_STOPPED
        data = _livemath_job(srv.base_url, tmp_path / "resumed", root, "cluster")
        assert cli.run_one(checked(data)) == 0
        got["resumed"] = _records(cli.run_dir_for(data), tmp_path / "resumed")
    local = got["local"]
    assert local["summary"]["counts"]["accept"] >= 1  # a job that learned something, so the records say something
    # the params are the config of the run's first start: the resumed run was started local
    modes = {mode: got[mode]["params"].pop("ray.mode") for mode in got}
    for mode in got:  # the simulated crash of the resumed run's first start
        got[mode]["params"].pop("debug.interrupt_after")
    assert modes == {"local": "local", "cluster": "cluster", "resumed": "local"}
    for mode in ("cluster", "resumed"):
        for key in local:
            assert local[key] == got[mode][key], (mode, key)


def _eval_job(url: str, tasks: Path, out: Path, *extra: str) -> dict:
    data = _data(
        f"env.data_dir={tasks}",
        f"eval.skill_path={tasks.parent / 'skill.md'}",
        "mode=eval",
        "eval.split=test",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        "debug.progress=off",
        "tracking=none",
        "ray.mode=local",
        *extra,
        experiment="custom",
    )
    return cli.resolve_paths(data)


@pytest.mark.slow
def test_a_local_run_keeps_its_budget_and_replays_its_cache(tmp_path, monkeypatch):
    """The gateway's budget stops a local run with the usual exit, and a recorded local run replays with the
    endpoint gone (the same gateway code as on Ray, hosted on a thread)."""
    from skillopt_ray.base.exit_codes import EXIT_STOPPED

    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path / "no-kept-cluster"))
    tasks = write_tasks(tmp_path / "data", 8)
    with ScriptedServer(policy=reply) as srv:
        capped = _eval_job(
            srv.base_url, tasks, tmp_path / "capped", "llm.budget.max_calls=3", "llm.target.max_concurrency=1"
        )
        assert cli.run_one(checked(capped)) == EXIT_STOPPED
        assert len(srv.state.request_times) <= 3  # not one call past the cap
        data = _eval_job(srv.base_url, tasks, tmp_path / "out")
        assert cli.run_one(checked(data)) == 0
        url = srv.base_url
    recorded = json.loads((cli.run_dir_for(data) / "summary.json").read_text())
    replay = _eval_job(url, tasks, tmp_path / "out", "llm.cache_mode=replay")
    assert cli.run_one(checked(replay)) == 0  # the server is gone: every reply comes from the run's cache
    replayed = json.loads((cli.run_dir_for(replay) / "summary.json").read_text())
    assert replayed["eval"] == recorded["eval"] and replayed["eval"]["hard"] == 1.0
    assert replayed["tokens"]["calls"] == recorded["tokens"]["calls"] == 8  # no call of its own
    assert replayed["tokens"]["cache_hits"] == recorded["tokens"]["cache_hits"] + 8


def test_a_local_training_run_logs_to_mlflow_without_waiting_for_it(tmp_path, monkeypatch):
    """In one process MLflow opens only once the first model call went out; a training run logs its seed skill
    before that call. A logging call that waited for the tracker would hold the run until the wait for the first
    call gave up (it once waited the 10 s limit): here that wait is long, and it must end by the call, not by its
    limit; the MLflow run holds the seed skill."""
    from mlflow.tracking import MlflowClient
    from skillopt_envs.livemathematicianbench.samples import ensure_samples

    from skillopt_ray.engine.driver import TrackerWhenReady

    ended_by_the_call: list[bool] = []  # at each use that waits for the tracker: had a model call started its open?
    wait = TrackerWhenReady._wait

    def recording(self):
        ended_by_the_call.append(self._start is not None and self._start.is_set())
        wait(self)

    monkeypatch.setattr(TrackerWhenReady, "_wait", recording)
    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path / "no-kept-cluster"))
    root = ensure_samples(str(tmp_path / "samples"))
    with ScriptedServer(Policies(target="nonsense")) as srv:
        data = _livemath_job(srv.base_url, tmp_path / "out", root, "local")
        assert cli.run_one(checked(data)) == 0
        assert srv.state.request_times  # it made its model calls
    assert ended_by_the_call and all(ended_by_the_call)
    ml = json.loads((cli.run_dir_for(data) / "mlflow_run.json").read_text())
    client = MlflowClient(ml["tracking_uri"])
    assert client.get_run(ml["run_id"]).info.status == "FINISHED"
    assert "skills/skill_v0000.md" in {a.path for a in client.list_artifacts(ml["run_id"], "skills")}


def test_a_run_that_ends_whole_drops_the_traceback_an_earlier_command_left(tmp_path, monkeypatch):
    """error.txt is the traceback of a command that failed (or of a run dying after its command was killed); once a
    later command ends the run whole it no longer describes the run and is removed (a killed-and-resumed run's folder
    is then the uninterrupted run's)."""
    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path / "no-kept-cluster"))
    tasks = write_tasks(tmp_path / "data", 4)
    with ScriptedServer(policy=reply) as srv:
        data = _eval_job(srv.base_url, tasks, tmp_path / "out")
        run_dir = cli.run_dir_for(data)
        run_dir.mkdir(parents=True)
        (run_dir / "error.txt").write_text("Traceback: ActorDiedError (the gateway died with its killed command)\n")
        assert cli.run_one(checked(data)) == 0
    assert not (run_dir / "error.txt").exists()
    assert json.loads((run_dir / "summary.json").read_text())["eval"]["hard"] == 1.0
