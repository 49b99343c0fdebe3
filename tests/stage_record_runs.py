"""Scripted one-epoch runs that exercise every stage record (reflect, aggregate, select, update, gate and the
appendix flush) in each update mode; tests/fixtures/stage_records/ holds the records these runs wrote before the
stage records were typed, and tests/runs/test_stage_records.py checks today's code reads and writes them unchanged.

Regenerate (only when a record's layout changes on purpose):
    .venv/bin/python -m tests.stage_record_runs tests/fixtures/stage_records
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from conformance_helpers import FakeRunner, tasks
from skillopt_envs.chat import JsonResult

from skillopt_ray.config import Config, OptimizerConfig
from skillopt_ray.engine.trainer import Splits, Trainer  # noqa: E402
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.tracking import Tracker  # noqa: E402

SEED_SKILL = "# Seed skill\n- Be careful.\n\n## Execution Notes\n"
STAGES = ("reflect", "aggregate", "select", "update", "gate", "appendix_notes")

VARIANTS: dict[str, dict[str, Any]] = {
    "patch_ranked": dict(update_mode="patch", learning_rate=2, min_learning_rate=1, skill_aware_reflection=True),
    "patch_autonomous": dict(update_mode="patch", lr_control_mode="autonomous"),
    "rewrite": dict(update_mode="rewrite_from_suggestions", learning_rate=2, min_learning_rate=1),
    "full_rewrite": dict(update_mode="full_rewrite_minibatch", refuse_echoed_rewrites=True),
}


class StageOptimizer:
    """Answers every optimizer stage with replies that fill each record's optional parts."""

    def __init__(self, mode: str):
        self.mode = mode
        self.keys: list[str] = []

    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> JsonResult:
        self.keys.append(req.key)
        data = self.answer(req.stage, req.key)
        return JsonResult(data, json.dumps(data))

    def items(self, key: str) -> tuple[str, list[dict[str, Any]]]:
        if self.mode == "patch":
            return "edits", [{"op": "append", "content": f"- tip {i} from {key}"} for i in range(2)] + [
                {"op": "replace", "target": "no such line", "content": "x"},
                {"op": "delete", "target": "Be careful"},
            ]
        if self.mode == "rewrite_from_suggestions":
            return "revise_suggestions", [
                {"type": "add", "title": f"t{i}", "instruction": f"do {i}", "priority_hint": "high"} for i in range(3)
            ]
        return "skill_candidates", [
            {"title": "echo", "change_summary": ["copied"], "new_skill": "## Current Skill\n[...]\n"},
            {"title": "real", "change_summary": "one line", "new_skill": f"# Better skill from {key}\n- Plan.\n"},
        ]

    def answer(self, stage: str, key: str) -> dict[str, Any]:
        pk, items = self.items(key)
        if stage == "analyst":
            return {
                "batch_size": 2,
                "failure_summary": [{"failure_type": "premature_stop", "count": 1, "description": "gave up"}],
                "patch": {"reasoning": "r", pk: items},
                "appendix_notes": ["Check the room first.", {"note": "Re-read the goal."}],
            }
        if stage == "merge":
            return {"reasoning": "merged", pk: items + [dict(it, title="dup") for it in items]}
        if stage == "ranking":
            return {"reasoning": "rank", "selected_indices": [3, 3, 0, 99, 1]}
        if stage == "lr_autonomous":
            return {"learning_rate": "3 edits", "reasoning": "some", "confidence": "high", "risk_notes": ["r1"]}
        if stage == "rewrite":
            return {"new_skill": f"# Rewritten {key}\n- Plan.\n", "change_summary": ["merged tips"]}
        if stage == "appendix_consolidate":
            return {"appendix_notes": ["Check the room first."]}
        raise AssertionError(f"unexpected stage {stage}")

    async def save_ledger(self) -> dict[str, Any]:
        return {"totals": {"tokens": 0, "cost_usd": 0.0}, "entries": {}}


def run_variant(root: Path, name: str, seed_from: Path | None = None) -> tuple[RunDir, StageOptimizer]:
    """One scripted run of the variant; `seed_from` (a fixture folder of one step) is copied into the run first,
    as a run killed after that step's stages left it."""
    cfg = Config(experiment="stage-records")
    cfg.seed = 7
    cfg.optimizer = OptimizerConfig(
        epochs=1,
        batch_size=2,
        minibatch_size=1,
        merge_batch_size=2,
        slow_update=False,
        meta_skill=False,
        **VARIANTS[name],
    )
    rd = RunDir(root / name).ensure()
    if seed_from is not None:
        shutil.copytree(seed_from, rd.root / "steps" / seed_from.name, dirs_exist_ok=True)
    llm = StageOptimizer(cfg.optimizer.update_mode)
    splits = Splits(tasks("tr", 4), tasks("va", 2), tasks("te", 1))
    trainer = Trainer(cfg, rd, llm, FakeRunner(), Tracker(False, None, "stage-records", root), splits, SEED_SKILL)
    asyncio.run(trainer.run())
    return rd, llm


def stage_files(rd: RunDir) -> list[Path]:
    """Every stage record the run wrote, step by step."""
    return sorted(p for p in (rd.root / "steps").glob("*/*.json") if p.stem in STAGES)


def write_fixtures(out: Path, work: Path) -> None:
    for name in VARIANTS:
        rd, _ = run_variant(work, name)
        for p in stage_files(rd):
            dest = out / name / p.parent.name / p.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_fixtures(Path(sys.argv[1]), Path(tmp))
