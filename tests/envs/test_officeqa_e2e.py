"""`+experiment=officeqa` end to end through the driver, the env actors and the gateway on the built-in sample
bulletins: the scripted target really uses the tools over several turns (grep the bulletin, read the hit's line,
answer from what it read) and gets the answer right only once the optimizer has written the rule for the
question's type into the skill, so a run must learn, pass the validation gate and score higher on test."""

from __future__ import annotations

import json

import pytest
from helpers import checked
from officeqa_helpers import tool_agent
from scripted_server import Policies, ScriptedServer
from skillopt_envs.officeqa.benchmark import OfficeQABenchmark

from skillopt_ray import cli

pytestmark = pytest.mark.slow


def test_officeqa_experiment_uses_tools_over_turns_and_learns(ray_cluster, tmp_path):
    sample = str(tmp_path / "samples")
    bench = OfficeQABenchmark({"options": {"sample_dir": sample}})
    types = {t.task_id: t.task_type for s in ("train", "val", "test") for t in bench.load_split(s)}
    optimizer = Policies(target="rule_gated")
    with ScriptedServer(policy=tool_agent(types, optimizer)) as srv:
        overrides = [
            "+experiment=officeqa",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "debug.progress=off",
            f"env.options.sample_dir={sample}",
            "env.max_turns=6",
            "env.limit_train=2",
            "env.limit_selection=4",
            "env.limit_test=4",
        ]
        data = cli.plain(cli.compose(overrides))
        data = cli.resolve_paths(data)
        code = cli.run_one(checked(data))
        rd = cli.run_dir_for(data)
        bodies = list(srv.state.bodies)
    assert code == 0
    targets = [b for b in bodies if b.get("tools")]
    assert targets and any(m["role"] == "tool" for b in targets for m in b["messages"])
    assert max(sum(m["role"] == "assistant" for m in b["messages"]) for b in targets) >= 2  # several turns
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["test"]["initial"]["hard"] < summary["test"]["best"]["hard"], summary["test"]
    assert summary["counts"]["accept"] >= 1 and "RULE-" in (rd / "best_skill.md").read_text()
    gate = [p.name for p in (rd / "steps" / "e01_s001").iterdir()]
    assert any("gate" in n for n in gate), gate
    analyst = "\n".join(m["content"] for stage, _k, msgs in optimizer.optimizer_log if stage == "analyst" for m in msgs)
    assert "[action] grep(pattern=" in analyst and "[action] read(path=" in analyst and "[obs]    " in analyst
    assert "but expected '" in analyst  # the gold reaches the analysts in the failure reason


def test_a_node_without_the_corpus_stops_the_run_in_one_line(ray_cluster, tmp_path):
    """The env actor resolves the corpus on its own node: none there stops the run with one line naming the node
    and the paths it looked at (never an episode scored 0 or an infra error per episode)."""
    import asyncio
    import shutil

    import ray
    from skillopt_envs.base import DataError, EpisodeContext

    from skillopt_ray.engine.envpool import EnvPool, PoolSettings

    sample = tmp_path / "samples"
    bench = OfficeQABenchmark({"options": {"sample_dir": str(sample)}})
    task = bench.load_split("test")[0]
    shutil.rmtree(sample / "treasury_bulletins_parsed")  # the questions are here, the corpus is not
    cfg = {"max_turns": 3, "options": {"sample_dir": str(sample), "docs_dirs": [str(tmp_path / "corpus_elsewhere")]}}
    pool = EnvPool("officeqa", cfg, None, PoolSettings(1, 1, 0.0, 60.0, 1))
    try:
        with pytest.raises(DataError) as e:
            asyncio.run(pool.run([task], "", EpisodeContext("k", False, 3, 0)))
    finally:
        pool.shutdown()
    msg = str(e.value)
    assert "\n" not in msg and ray.util.get_node_ip_address() in msg
    assert f"docs_dirs names {tmp_path / 'corpus_elsewhere'}, which does not exist" in msg  # named, so not skipped
