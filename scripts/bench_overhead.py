"""Per-step bookkeeping cost of a long run: the time the trainer spends outside the stages' model and
episode calls (stage records, state commit, history, step buffer, score cache, tracking) at step 1 and
at step N of one scripted run, with instant fake episodes and a fake optimizer (no Ray, no network).

    .venv/bin/python scripts/bench_overhead.py --steps 200 [--mlflow]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from skillopt_envs.base import EpisodeResult, Task  # noqa: E402
from skillopt_envs.chat import JsonResult  # noqa: E402

from skillopt_ray.config import Config, OptimizerConfig  # noqa: E402
from skillopt_ray.engine.trainer import Splits, Trainer  # noqa: E402
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.tracking import Tracker  # noqa: E402


class Runner:
    """Every training episode fails; selection results vary with the skill so candidates are sometimes accepted."""

    async def run(self, tasks: list[Task], skill: str, ctx: Any) -> list[EpisodeResult]:
        n = int(re.search(r"version: (\d+)", skill).group(1))  # type: ignore[union-attr]
        return [
            EpisodeResult(
                t.task_id,
                "t",
                hard=float(not ctx.training and (n + i) % 3 == 0),
                n_turns=1,
                task_description="g",
                fail_reason="failed: x",
                trajectory=[{"step": 0, "action": "look", "reasoning": "", "env_feedback": "room"}],
            )
            for i, t in enumerate(tasks)
        ]


class Optimizer:
    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> JsonResult:
        if req.stage == "analyst":  # one replace edit: the skill keeps its size, so only bookkeeping can grow
            old = re.search(r"version: \d+", req.messages[1]["content"]).group(0)  # type: ignore[union-attr]
            new = f"version: {int(old.split()[1]) + 1:06d}"
            data: dict[str, Any] = {
                "batch_size": 1,
                "failure_summary": [{"failure_type": "x", "count": 1, "description": "d"}],
                "patch": {"reasoning": "r", "edits": [{"op": "replace", "target": old, "content": new}]},
            }
        else:
            raise AssertionError(req.stage)
        return JsonResult(data, json.dumps(data))

    async def save_ledger(self) -> dict[str, Any]:
        return {"totals": {"tokens": 0, "cost_usd": 0.0}, "entries": {}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--mlflow", action="store_true", help="log to a real sqlite MLflow store")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_overhead."))
    cfg = Config(experiment="overhead")
    # 10 steps an epoch: the step buffer (reset each epoch, rendered whole as the reference does) stays bounded
    cfg.optimizer = OptimizerConfig(
        epochs=max(1, a.steps // 10), batch_size=1, minibatch_size=1, slow_update=False, meta_skill=False
    )
    rd = RunDir(tmp / "run").ensure()
    tracker = Tracker(a.mlflow, f"sqlite:///{tmp / 'mlflow.db'}", "overhead", tmp / "art")
    if a.mlflow:
        tracker.start({}, "overhead", {}, lambda rec: None)
    splits = Splits(
        [Task(f"tr{i}", "t") for i in range(10)], [Task(f"va{i}", "t") for i in range(6)], [Task("te0", "t")]
    )
    trainer = Trainer(cfg, rd, Optimizer(), Runner(), tracker, splits, "# seed\nversion: 000000\n")
    marks: list[float] = []
    commit = trainer.steps._commit

    async def timed(*args: Any, **kw: Any) -> None:
        t0 = time.perf_counter()
        await commit(*args, **kw)
        marks.append(time.perf_counter() - t0)

    trainer.steps._commit = timed  # type: ignore[method-assign]
    t0 = time.perf_counter()
    steps: list[float] = []
    orig = trainer.steps.run

    async def step(*args: Any) -> None:
        s0 = time.perf_counter()
        await orig(*args)
        steps.append(time.perf_counter() - s0)

    trainer.steps.run = step  # type: ignore[method-assign,assignment]
    asyncio.run(trainer.run())
    wall = time.perf_counter() - t0
    first, last = sum(steps[:10]) / 10, sum(steps[-10:]) / 10
    print(f"steps {len(steps)}, wall {wall:.1f} s, mlflow {'on' if a.mlflow else 'off'}")
    print(
        f"whole step (fake model and episodes): first 10 {first * 1000:.1f} ms, last 10 {last * 1000:.1f} ms, ratio {last / first:.2f}"
    )
    print(
        f"state commit: first 10 {sum(marks[:10]) / 10 * 1000:.1f} ms, last 10 {sum(marks[-10:]) / 10 * 1000:.1f} ms, "
        f"ratio {sum(marks[-10:]) / max(sum(marks[:10]), 1e-9):.2f}"
    )
    print(
        f"state.json {rd.state_path.stat().st_size // 1024} KB, history.json {(rd.root / 'history.json').stat().st_size // 1024} KB"
    )


if __name__ == "__main__":
    main()
