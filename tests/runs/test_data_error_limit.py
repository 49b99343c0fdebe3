"""A score over a small scored minority is not the split's score (issue 40, item 5): the table says `scored n of N`
when some episodes were not scored, and a split's evaluation whose tasks are mostly broken data stops the run
(optimizer.max_data_error_fraction, 0.25 by default) with one line naming the first broken task and the fix."""

from __future__ import annotations

import asyncio
import json

import pytest
from conformance_helpers import SEED, SEED_SKILL, ScriptedOptimizer, tasks
from skillopt_envs.base import DataError, EpisodeResult, Task

from skillopt_ray.cli.report import summary_table
from skillopt_ray.config import Config, ConfigError, OptimizerConfig, validate
from skillopt_ray.engine.trainer import Splits, Trainer  # noqa: E402
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.tracking import Tracker  # noqa: E402
from skillopt_ray.stages.rollout import check_data


class Runner:
    """Every task is solved, except that the tasks whose number is not 0 have a broken check (a data error) in
    the selection and test splits: 9 of 10 broken, as in the issue's run."""

    async def run(self, batch: list[Task], skill: str, ctx) -> list[EpisodeResult]:
        out = []
        for t in batch:
            if not ctx.training and t.task_id.startswith(("va", "te")) and not t.task_id.endswith("0"):
                out.append(EpisodeResult(t.task_id, t.task_type, fail_reason="data_error", error="data: check raised"))
                continue
            out.append(EpisodeResult(t.task_id, t.task_type, hard=1.0, soft=1.0, n_turns=1, task_description="g"))
        return out


def _run(tmp_path, **optimizer):
    cfg = Config(experiment="data")
    cfg.seed = SEED
    cfg.optimizer = OptimizerConfig(epochs=1, batch_size=2, minibatch_size=1, slow_update=False, **optimizer)
    rd = RunDir(tmp_path / "run").ensure()
    splits = Splits(tasks("tr", 2), tasks("va", 10), tasks("te", 10))
    trainer = Trainer(
        cfg, rd, ScriptedOptimizer(), Runner(), Tracker(False, None, "data", tmp_path), splits, SEED_SKILL
    )
    asyncio.run(trainer.run())
    return rd.root


def test_mostly_broken_evaluations_stop_the_run_by_default(tmp_path):
    assert OptimizerConfig().max_data_error_fraction == 0.25
    with pytest.raises(DataError) as e:
        _run(tmp_path)
    msg = str(e.value)
    assert msg.startswith("9 of 10 ") and "would rest on 1" in msg and "va1: data: check raised" in msg
    assert "optimizer.max_data_error_fraction (now 0.25)" in msg and "\n" not in msg


def test_a_partly_scored_test_split_says_so_on_the_table(tmp_path):
    root = _run(tmp_path, max_data_error_fraction=1.0)  # the user accepts it: the rest is scored and labelled
    s = json.loads((root / "summary.json").read_text())
    table = summary_table({**s, "tokens": {"calls": 0, "cache_hits": 0, "tokens": 0, "cost_usd": 0.0}})
    initial = next(line for line in table.splitlines() if line.startswith("initial"))
    assert initial.endswith("1.000  test scored 1 of 10")
    assert "test hard delta (best - initial) +0.000 (over the scored test episodes only)" in table


def test_fully_scored_lines_read_as_before_and_the_eval_line_says_scored():
    e = {"hard": 1.0, "soft": 1.0, "n": 20, "n_scored": 2, "infra_errors": 0, "data_errors": 18, "per_type": {}}
    line = summary_table({"mode": "eval", "split": "test", "eval": e})
    assert "hard 1.000  soft 1.000  (n=20, scored 2 of 20, infra errors 0, data errors 18)" in line
    full = summary_table({"mode": "eval", "split": "test", "eval": {**e, "n_scored": 20, "data_errors": 0}})
    assert "(n=20, infra errors 0, data errors 0)" in full and "scored" not in full


def test_the_limit_is_a_share_of_the_episodes_played():
    ok = EpisodeResult("a", "t", hard=1.0, soft=1.0)
    bad = EpisodeResult("b", "t", fail_reason="data_error", error="data: broken")
    gone = EpisodeResult("c", "t", fail_reason="not_played")
    check_data([ok, ok, ok, bad], 0.25, "test")  # 1 of 4: at the limit, not past it
    check_data([ok, bad, gone, gone], 0.5, "selection")  # the gate's early stop: 1 of the 2 played
    with pytest.raises(DataError, match="^2 of 4 test episodes"):
        check_data([ok, ok, bad, bad], 0.25, "test")
    cfg = Config(experiment="x")
    cfg.optimizer.max_data_error_fraction = 1.5
    with pytest.raises(ConfigError, match="optimizer.max_data_error_fraction"):
        validate(cfg)
