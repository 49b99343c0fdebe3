"""The private APIs of Hydra and MLflow the project uses live in skillopt_ray.base.private_apis only; each is called
here, so an upgrade that moves one fails this test by name (not a user's run)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import skillopt_ray
from skillopt_ray.base import private_apis

PRIVATE = re.compile(
    r"^\s*(?:from|import)\s+(?:ray|mlflow|hydra|omegaconf)[\w.]*\._\w"  # a private module
    r"|^\s*from\s+(?:ray|mlflow|hydra|omegaconf)\S*\s+import\s+\(?\s*_\w"  # a private name
    r"|ray\._private|ray\.tune\.search\.variant_generator|^\s*(?:from|import)\s+mlflow\.store"
)


def test_no_private_import_outside_the_wrapper():
    root = Path(skillopt_ray.__file__).resolve().parent
    found = [
        f"{f.relative_to(root)}:{i}: {line.strip()}"
        for f in sorted(root.rglob("*.py"))
        if f.name != "private_apis.py"
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert found == []


def test_mlflow_store_is_built_at_the_schema_head(tmp_path):
    head = private_apis.mlflow_schema_head()
    assert re.fullmatch(r"[0-9a-f]{8,}", head)
    db = tmp_path / "m.db"
    private_apis.mlflow_create_sqlite_store(db)
    con = sqlite3.connect(db)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        (rev,) = con.execute("SELECT version_num FROM alembic_version").fetchone()
    finally:
        con.close()
    assert {"runs", "experiments", "metrics", "params", "tags"} <= tables and rev == head


def test_hydra_parser_search_path_and_job_split(tmp_path):
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    from skillopt_ray.cli.compose import CONF_DIR
    from skillopt_ray.config import register_schema

    args = private_apis.hydra_args_parser().parse_intermixed_args(["seed=1,2", "-m", "--cfg", "job"])
    assert args.multirun and args.cfg == "job" and args.overrides == ["seed=1,2"]
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nexperiment: mine\nseed: 7\n")
    register_schema()
    GlobalHydra.instance().clear()
    try:
        hydra = private_apis.hydra_create(CONF_DIR, [str(tmp_path)])
        cfg = hydra.compose_config(
            config_name="config", overrides=["+experiment=mine"], run_mode=RunMode.RUN, with_log_configuration=False
        )
        assert cfg.seed == 7 and cfg.experiment == "mine"  # the --config-dir entry is searched
    finally:
        GlobalHydra.instance().clear()
    jobs = private_apis.hydra_split_jobs(OverridesParser.create().parse_overrides(["seed=1,2", "mode=train"]))
    assert jobs == [["seed=1", "mode=train"], ["seed=2", "mode=train"]]


def test_hydra_job_composition_and_context(tmp_path):
    """A multirun's job composed as Hydra's launcher composes it (the sweep's hydra overrides, its ${now:...}), and
    the context Hydra's run_job takes."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from skillopt_ray.cli.compose import CONF_DIR
    from skillopt_ray.config import register_schema

    register_schema()
    GlobalHydra.instance().clear()
    try:
        hydra = private_apis.hydra_create(CONF_DIR)
        sweep = hydra.compose_config(
            config_name="config",
            overrides=["+experiment=searchqa", "seed=1,2", f"hydra.sweep.dir={tmp_path}/${{now:%H%M%S%f}}"],
            run_mode=RunMode.MULTIRUN,
            with_log_configuration=False,
        )
        folder = str(sweep.hydra.sweep.dir)
        job = private_apis.hydra_compose_job(hydra, sweep, ["+experiment=searchqa", "seed=2"])
        assert job.seed == 2 and str(job.hydra.sweep.dir) == folder  # the sweep's time, not the job's
        assert list(job.hydra.overrides.task) == ["+experiment=searchqa", "seed=2"]
        context = private_apis.hydra_context(hydra, sweep)
        assert context.config_loader is hydra.config_loader and hasattr(context.callbacks, "on_job_start")
    finally:
        GlobalHydra.instance().clear()


LEAN_RUN = """
import json, os, subprocess
import ray
from ray._private import node, parameter
from skillopt_ray.base.private_apis import ray_init_lean

before = (parameter.RayParams, node.Node.start_api_server)
ray_init_lean(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
              object_store_memory=96 * 1024 * 1024)
restored = (parameter.RayParams, node.Node.start_api_server) == before

@ray.remote(num_cpus=0)
class Echo:
    def echo(self, x):
        return x

@ray.remote(num_cpus=0)
def add(a, b):
    return a + b

out = {"task": ray.get(add.remote(2, 3)), "actor": ray.get(Echo.remote().echo.remote("hi")), "restored": restored}
def children(parent):
    # each child's whole command line from /proc (ps cuts long lines to the terminal's width)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == parent:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    found.append(f.read().replace(b"\\0", b" ").decode(errors="replace").strip())
        except (OSError, ValueError, IndexError):
            continue
    return found

out["children"] = children(os.getpid())
ray.shutdown()
print(json.dumps(out))
"""


def test_a_lean_ray_start_runs_tasks_and_actors_without_the_monitors_and_api_server(tmp_path):
    """ray_init_lean: Ray's head node without the autoscaler monitor, the log monitor and the dashboard's API
    server (a private run uses none), still running tasks and actors; Ray's own classes are put back after the
    call."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    p = subprocess.run(
        [sys.executable, "-c", LEAN_RUN], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["task"] == 5 and out["actor"] == "hi" and out["restored"]
    started = "\n".join(out["children"])
    assert "gcs_server" in started and "raylet" in started  # the head node itself is there
    for absent in ("autoscaler/_private/monitor.py", "log_monitor.py", "dashboard/dashboard.py"):
        assert absent not in started


def test_hydra_version_and_completion_help():
    import hydra

    assert private_apis.hydra_version() == hydra.__version__
    assert "install" in private_apis.hydra_completion_help().lower()


def test_python_exit_handlers_wait_for_threads_then_run_atexit(tmp_path):
    import subprocess
    import sys

    script = (
        "import atexit, threading, time\n"
        "from skillopt_ray.base import private_apis\n"
        "order = []\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), order.append('thread'))).start()\n"
        "atexit.register(lambda: order.append('atexit'))\n"
        "private_apis.python_exit_handlers()\n"
        "print(','.join(order))\n"
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "thread,atexit"
