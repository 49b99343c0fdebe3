"""`+experiment=custom` end to end on a JSONL file: the scripted target answers right only once the optimizer has
written the rule for the task's type into the skill, so the run learns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from custom_helpers import write_jsonl
from helpers import checked
from scripted_server import Policies, ScriptedServer

from skillopt_ray import cli

pytestmark = pytest.mark.slow


def tasks_file(path: Path) -> tuple[Path, dict[str, tuple[str, str, str]]]:
    """Twelve sums, 6 train / 2 val / 4 test, with the scripted server's right and wrong replies."""
    rows, answers = [], {}
    for i in range(12):
        split = "train" if i < 6 else "val" if i < 8 else "test"
        rows.append({"id": f"sum{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i), "split": split,
                     "metadata": {"task_type": "arith"}})  # fmt: skip
        answers[f"sum{i}"] = ("arith", f"<answer>{2 * i}</answer>", f"<answer>{2 * i + 1}</answer>")
    return write_jsonl(path, rows), answers


def test_a_jsonl_task_file_trains_a_skill_that_learns(ray_cluster, tmp_path):
    data, answers = tasks_file(tmp_path / "tasks.jsonl")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        overrides = [
            "+experiment=custom",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "debug.progress=off",
            "tracking=none",
            f"env.data_dir={data}",
            "env.options.scorer=numeric",
            "env.limit_train=4",
            "env.limit_selection=2",
            "optimizer.gate_test=none",  # the paper gate: 2 selection tasks are too few for the sequential one
            "env.limit_test=4",
            "optimizer.batch_size=4",
            "optimizer.minibatch_size=2",
        ]
        d = cli.plain(cli.compose(overrides))
        d = cli.resolve_paths(d)
        code, rd = cli.run_one(checked(d)), cli.run_dir_for(d)
    assert code == 0
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["test"]["initial"]["hard"] == 0.0 and summary["test"]["best"]["hard"] == 1.0, summary["test"]
    assert summary["counts"]["accept"] >= 1 and "RULE-arith" in (rd / "best_skill.md").read_text()
    rollout = json.loads((rd / "steps/e01_s001/rollout.json").read_text())
    assert rollout and all("Expected: ['" in r["trajectory"][-1]["content"] for r in rollout)
