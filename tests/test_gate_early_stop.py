"""Early-stopping gate (issue 16, `optimizer.gate_early_stop`, off in the paper protocol): with the hard
metric and a strict comparison, a candidate that has lost so many selection episodes that it can no longer
beat the current score is rejected without playing the rest. Same decisions, fewer paid episodes."""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

import pytest

from envs.base import NOT_PLAYED, EpisodeResult, Task
from skillopt_ray.config import Config, OptimizerConfig
from skillopt_ray.llm.types import JsonResult
from skillopt_ray.rundir import RunDir
from skillopt_ray.tracking import Tracker
from skillopt_ray.trainer import Splits, Trainer


class Runner:
    """Plays episodes one after another, as a pool with one slot would. Selection task i passes for a skill by
    a fixed pseudo-random rule of (skill, i), so candidates differ; training episodes all fail."""

    def __init__(self) -> None:
        self.selection_played = 0

    async def run(self, tasks: list[Task], skill: str, ctx: Any, stop=None) -> list[EpisodeResult]:
        out, stopped = [], False
        for i, t in enumerate(tasks):
            if stopped:
                out.append(EpisodeResult(t.task_id, t.task_type, fail_reason=NOT_PLAYED))
                continue
            hard = 0.0 if ctx.training else float(zlib.crc32(f"{skill}|{t.task_id}".encode()) % 3 != 0)
            self.selection_played += not ctx.training
            r = EpisodeResult(t.task_id, t.task_type, hard=hard, soft=hard, n_turns=1, task_description="g",
                              fail_reason="" if hard else "failed: no", trajectory=[{"role": "agent", "content": "tried"}])
            out.append(r)
            stopped = stop is not None and stop(r)
        return out


class Optimizer:
    async def chat_json(self, req, schema, name="reply"):
        assert req.stage == "analyst", req.stage
        data = {"batch_size": 1, "failure_summary": [], "patch": {"reasoning": "r", "edits": [{"op": "append", "content": f"- tip {req.key}"}]}}
        return JsonResult(data, json.dumps(data))

    async def save_ledger(self) -> dict[str, Any]:
        return {"totals": {"tokens": 0, "cost_usd": 0.0}, "entries": {}}


def _run(tmp_path, early: bool):
    cfg = Config(experiment="early")
    cfg.optimizer = OptimizerConfig(epochs=4, batch_size=1, minibatch_size=8, slow_update=False, meta_skill=False, gate_early_stop=early)
    rd = RunDir(tmp_path / f"early{early}").ensure()
    runner = Runner()
    splits = Splits([Task(f"tr{i}", "t") for i in range(4)], [Task(f"va{i}", "t") for i in range(12)], [Task("te0", "t")])
    asyncio.run(Trainer(cfg, rd, Optimizer(), runner, Tracker(False, None, "early", tmp_path), splits, "# seed\n").run())
    history = json.loads((rd.root / "history.json").read_text())
    return history, runner.selection_played, json.loads((rd.root / "summary.json").read_text())


def test_same_decisions_with_fewer_selection_episodes(tmp_path):
    full, played_full, s_full = _run(tmp_path, False)
    early, played_early, s_early = _run(tmp_path, True)
    assert [h["action"] for h in early] == [h["action"] for h in full]
    assert [h["current_score"] for h in early] == [h["current_score"] for h in full]
    assert s_early["selection"]["best"] == s_full["selection"]["best"] and s_early["versions"] == s_full["versions"]
    rejects = sum(h["action"] == "reject" for h in full)
    assert rejects >= 3 and any(h["action"].startswith("accept") for h in full)  # the run exercises both outcomes
    saved = 1 - played_early / played_full
    print(f"gate early stop: {rejects} rejects in {len(full)} steps, selection episodes {played_full} -> {played_early} ({saved:.0%} saved)")
    assert saved > 0.1
    stopped = [json.loads(p.read_text()) for p in sorted((tmp_path / "earlyTrue/steps").glob("*/gate.json"))]
    assert all(g["action"] == "reject" for g in stopped if g.get("early_stopped"))
    assert any(g.get("early_stopped") and g["episodes_not_played"] > 0 and g["reason"].startswith("rejected early") for g in stopped)


@pytest.mark.parametrize("metric", ["soft", "mixed"])
def test_only_the_hard_gate_stops_early(tmp_path, metric):
    cfg = Config(experiment="early")
    cfg.optimizer = OptimizerConfig(gate_metric=metric, gate_early_stop=True)
    trainer = Trainer(cfg, RunDir(tmp_path).ensure(), Optimizer(), Runner(), Tracker(False, None, "e", tmp_path),
                      Splits([], [], []), "# s\n")
    assert trainer.certain_reject() is None
