"""A benchmark of your own outside the package: env.benchmark=module:Class or an entry point of skillopt_ray.benchmarks.
A class that cannot be imported or breaks the contract is one line and exit 2 before Ray; a good one trains through
the CLI with no edit to the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import skillopt_envs
from scripted_server import Policies, ScriptedServer

from skillopt_ray import cli

REPO = Path(__file__).resolve().parents[2]

# a whole benchmark in 30 lines: it sees only the public contract (skillopt_envs.base) and the kit
PLUGIN = '''
from skillopt_envs.base import Benchmark, EpisodeResult, Task
from skillopt_envs.kit import chat, split_name


class EchoBench(Benchmark):
    """Say the task's word back."""

    name = "echo"

    def load_split(self, split):
        s = split_name(split, "echo")
        return [Task(f"{s}{i}", "echo", {"word": f"word{i}"}) for i in range(2)]

    def seed_skill(self):
        return "# Skill\\n"

    async def run_episode(self, task, skill, llm, ctx):
        messages = [{"role": "system", "content": skill}, {"role": "user", "content": "Say the word."}]
        reply = await chat(llm, messages, f"{ctx.key}/{task.task_id}/t0")
        ok = float(task.payload["word"] in reply)
        return EpisodeResult(
            task.task_id, task.task_type, hard=ok, soft=ok, n_turns=1,
            fail_reason="" if ok else f"expected {task.payload['word']}",
            trajectory=[{"type": "message", "turn": 1, "content": reply}],
        )
'''
BROKEN = {
    "boom.py": (
        "raise RuntimeError('the plugin broke')\n",
        "importing my_plugin.boom failed (RuntimeError: the plugin broke)",
    ),
    "notbench.py": ("class X:\n    pass\n", "is not a subclass of skillopt_envs.base.Benchmark"),
    "half.py": (
        "from skillopt_envs.base import Benchmark\nclass X(Benchmark):\n    def seed_skill(self):\n        return ''\n",
        "it does not define load_split, run_episode",
    ),
    "sync.py": (
        "from skillopt_envs.base import Benchmark\nclass X(Benchmark):\n    def seed_skill(self):\n        return ''\n"
        "    def load_split(self, s):\n        return []\n    def run_episode(self, *a):\n        return None\n",
        "run_episode must be `async def`",
    ),
}


@pytest.fixture()
def plugin_dir(tmp_path):
    d = tmp_path / "elsewhere"
    (d / "my_plugin").mkdir(parents=True)
    (d / "my_plugin" / "__init__.py").write_text("")
    (d / "my_plugin" / "bench.py").write_text(PLUGIN)
    for name, (body, _) in BROKEN.items():
        (d / "my_plugin" / name).write_text(body)
    return d


@pytest.mark.parametrize("module", sorted(BROKEN))
def test_a_broken_plugin_is_one_line_and_exit_2(plugin_dir, monkeypatch, capsys, module):
    monkeypatch.syspath_prepend(str(plugin_dir))
    spec = f"my_plugin.{module[:-3]}:X"
    code = cli.main(["+experiment=plugin", f"env.benchmark={spec}", f"output_dir={plugin_dir / 'out'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and BROKEN[module][1] in err and f"env.benchmark={spec}" in err and len(err.splitlines()) == 1


def test_unknown_modules_classes_and_entry_points_are_named(plugin_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_dir))
    for spec, said in [
        ("nowhere.mod:X", "module 'nowhere' cannot be found"),
        ("my_plugin.bench:Nope", "has no 'Nope'"),
        ("not-installed", "neither module:Class nor an entry point"),
    ]:
        with pytest.raises(skillopt_envs.DataError, match=said):
            skillopt_envs.benchmark_class("plugin", spec)


def test_an_entry_point_names_a_plugin(plugin_dir, monkeypatch):
    info = plugin_dir / "my_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[skillopt_ray.benchmarks]\necho = my_plugin.bench:EchoBench\n")
    monkeypatch.syspath_prepend(str(plugin_dir))
    cls = skillopt_envs.benchmark_class("plugin", "echo")
    assert cls.__name__ == "EchoBench"
    assert [t.task_id for t in skillopt_envs.make("plugin", {"benchmark": "echo"}).load_split("valid_unseen")] == [
        "test0",
        "test1",
    ]


@pytest.mark.slow
def test_a_plugin_outside_the_project_trains_through_the_cli(plugin_dir, tmp_path):
    answers = {f"{s}{i}": ("echo", f"word{i}", "no idea") for s in ("train", "val", "test") for i in range(2)}
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        env = {**os.environ, "PYTHONPATH": str(plugin_dir), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
        args = [
            "+experiment=plugin",
            "env.benchmark=my_plugin.bench:EchoBench",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "tracking=none",
            "debug.progress=off",
            "env.limit_train=2",
            "optimizer.batch_size=2",
        ]
        p = subprocess.run(
            [sys.executable, "-m", "skillopt_ray", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=500,
        )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads(next((tmp_path / "out" / "runs").glob("*/summary.json")).read_text())
    assert summary["test"]["initial"]["hard"] == 0.0 and summary["test"]["best"]["hard"] == 1.0, summary["test"]


@pytest.mark.slow
def test_a_plugin_in_a_ray_jobs_working_dir_is_imported_on_the_env_actors(plugin_dir, local_head, tmp_path):
    """`ray job submit --working-dir <plugin folder>`: nothing installed, nothing on PYTHONPATH; the driver actor and
    the env actors import the class from the job's working directory."""
    env, dashboard = local_head
    answers = {f"{s}{i}": ("echo", f"word{i}", "no idea") for s in ("train", "val", "test") for i in range(2)}
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        args = [
            "+experiment=plugin",
            "env.benchmark=my_plugin.bench:EchoBench",
            "+smoke=tiny",
            "ray=cluster",
            "ray.env_actors=2",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "tracking=none",
            "debug.progress=plain",
        ]
        cmd = [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", dashboard, "--working-dir",
               str(plugin_dir), "--", sys.executable, "-m", "skillopt_ray", *args]  # fmt: skip
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "succeeded" in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]
    summary = json.loads(next((tmp_path / "out" / "runs").glob("*/summary.json")).read_text())
    assert summary["test"]["best"]["hard"] == 1.0, summary["test"]


def test_an_edited_plugin_class_is_a_new_run_and_a_named_one_refuses_to_resume(plugin_dir, monkeypatch, tmp_path):
    """The plugin's code was not in the run identity: an edited class resumed with the old class's scores."""
    from skillopt_ray.cli import load
    from skillopt_ray.cli.errors import UsageError
    from skillopt_ray.cli.identity import check_or_record, identity_record

    monkeypatch.syspath_prepend(str(plugin_dir))
    for name in [m for m in sys.modules if m.split(".")[0] == "my_plugin"]:  # another test's copy of the plugin
        monkeypatch.delitem(sys.modules, name)
    over = ["+experiment=plugin", "env.benchmark=my_plugin.bench:EchoBench", f"output_dir={tmp_path / 'out'}"]
    before = identity_record(load(over))
    assert identity_record(load(over)) == before  # stable while nothing changes
    rd = tmp_path / "named"
    rd.mkdir()
    check_or_record(rd, before, resuming=True)
    bench = plugin_dir / "my_plugin" / "bench.py"
    bench.write_text(bench.read_text() + "\n# an edit of the plugin's module\n")
    after = identity_record(load(over))
    assert after["identity"] != before["identity"]
    with pytest.raises(UsageError) as e:
        check_or_record(rd, after, resuming=True)
    assert "the benchmark plugin's code changed" in str(e.value) and "\n" not in str(e.value)
