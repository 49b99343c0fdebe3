"""Helpers shared by test files; fixtures live in conftest.py."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from skillopt_envs.base import EpisodeResult, Task
from skillopt_envs.chat import JsonResult

from skillopt_ray.config import Config, OptimizerConfig
from skillopt_ray.engine.trainer import Splits, Trainer  # noqa: E402
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.tracking import Tracker  # noqa: E402

SEED = 42


SEED_SKILL = "# Seed skill\n- Be careful.\n"


class FakeRunner:
    """Training episodes all fail (with an ALFWorld-shaped trajectory). Selection: va0 passes iff the skill
    holds slow-update guidance ("GUIDE"), so step candidates tie (reject) and a slow update improves.
    Boundary rollouts: `curr_passes(task_id)` decides the current skill's outcome, the previous skill fails."""

    def __init__(self, curr_passes=lambda tid: tid.endswith(("1", "3"))):
        self.calls: list[dict[str, Any]] = []
        self.curr_passes = curr_passes

    async def run(self, tasks: list[Task], skill: str, ctx) -> list[EpisodeResult]:
        self.calls.append({"key": ctx.key, "training": ctx.training, "ids": [t.task_id for t in tasks], "skill": skill})
        out = []
        for t in tasks:
            if ctx.training:
                hard = 0.0
            elif t.task_id.startswith("va") or t.task_id.startswith("te"):
                hard = 1.0 if (t.task_id in ("va0", "te0") and "GUIDE" in skill) else 0.0
            else:  # epoch-boundary rollouts on train tasks
                hard = 1.0 if ("curr" in ctx.key and self.curr_passes(t.task_id)) else 0.0
            out.append(
                EpisodeResult(
                    t.task_id,
                    t.task_type,
                    hard=hard,
                    soft=hard,
                    n_turns=1,
                    fail_reason="" if hard else FAIL,
                    task_description=f"goal of {t.task_id}",
                    trajectory=[
                        {"step": 0, "action": "look", "reasoning": "start", "env_feedback": f"room of {t.task_id}"}
                    ],
                )
            )
        return out


class ScriptedOptimizer:
    """Answers every optimizer stage and records each request."""

    def __init__(self, skip_keys=("train/e1s2",)):
        self.calls: list[Any] = []
        self.skip_keys = skip_keys

    async def chat_json(self, req, schema, name="reply"):
        self.calls.append(req)
        data = self.answer(req)
        return JsonResult(data, json.dumps(data))

    def answer(self, req) -> dict[str, Any]:
        key, stage = req.key, req.stage
        if stage == "analyst":
            edits = [] if key.startswith(self.skip_keys) else [{"op": "append", "content": f"- tip from {key}"}]
            return {
                "batch_size": 1,
                "failure_summary": [{"failure_type": "premature_stop", "count": 1, "description": "gave up"}],
                "patch": {"reasoning": "r", "edits": edits},
            }
        if stage == "merge":
            return {
                "reasoning": "merged",
                "edits": [
                    {"op": "append", "content": f"- merged {i}", "support_count": 2, "source_type": "failure"}
                    for i in range(5)
                ],
            }
        if stage == "ranking":
            return {"reasoning": "rank", "selected_indices": [4, 3, 2, 1, 0]}
        epoch = re.search(r"/e(\d+)", key)
        if stage == "slow_update":
            return {"reasoning": "assessed", "slow_update_content": f"GUIDE e{epoch.group(1)}"}
        if stage == "meta_skill":
            return {"reasoning": "coach", "meta_skill_content": f"META-E{epoch.group(1)}"}
        raise AssertionError(f"unexpected stage {stage}")

    async def save_ledger(self) -> dict[str, Any]:
        return {"totals": {"tokens": 0, "cost_usd": 0.0}, "entries": {}}

    def user(self, req) -> str:
        return req.messages[1]["content"]

    def of(self, stage: str, key_prefix: str = "") -> list[Any]:
        return [c for c in self.calls if c.stage == stage and c.key.startswith(key_prefix)]


def tasks(prefix: str, n: int, ttype: str = "pick_and_place") -> list[Task]:
    return [Task(f"{prefix}{i}", ttype, {}) for i in range(n)]


def make_run(tmp_path, *, epochs=3, train_n=4, samples=3, pairs="mixed", runner=None, llm=None):
    cfg = Config(experiment="conformance")
    cfg.seed = SEED
    cfg.optimizer = OptimizerConfig(
        epochs=epochs,
        batch_size=2,
        minibatch_size=1,
        merge_batch_size=8,
        learning_rate=4,
        min_learning_rate=2,
        lr_schedule="cosine",
        lr_control_mode="fixed",
        slow_update=True,
        slow_update_samples=samples,
        slow_update_gate=True,
        slow_update_pairs=pairs,
        meta_skill=True,
    )
    rd = RunDir(tmp_path / "run").ensure()
    runner = runner or FakeRunner()
    llm = llm or ScriptedOptimizer()
    splits = Splits(tasks("tr", train_n), tasks("va", 2), tasks("te", 1))
    trainer = Trainer(cfg, rd, llm, runner, Tracker(False, None, "conformance", tmp_path), splits, SEED_SKILL)
    asyncio.run(trainer.run())
    return trainer, rd, runner, llm, splits


FAIL = "Episode ended without completing the task"
