"""scripts/learning_experiment.py's report: paired per-task differences on the tasks both skills were scored on,
with their bootstrap interval, per seed and pooled, and the best skill shown."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from skillopt_ray.runs.records import Evaluation  # noqa: E402

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "learning_experiment.py"
_spec = importlib.util.spec_from_file_location("learning_experiment", _PATH)
assert _spec is not None and _spec.loader is not None
le = importlib.util.module_from_spec(_spec)
sys.modules["learning_experiment"] = le  # dataclasses look their module up while the class is made
_spec.loader.exec_module(le)


def _run(seed: int, initial: dict, best: dict) -> le.RunResult:
    iv = {"mean": 0.5, "lo": 0.2, "hi": 0.8, "n": len(initial), "level": 0.95, "method": "t"}
    return le.RunResult(
        seed,
        Path(f"/runs/s{seed}"),
        Evaluation(tasks=initial),
        Evaluation(tasks=best),
        {"test": {k: {"soft": iv, "hard": iv} for k in ("initial", "best")}},
        1234,
        10,
        600.0,
        1,
        2,
        f"# Skill\n\nrule of seed {seed}",
    )


def test_paired_differences_use_the_tasks_both_skills_scored():
    r = _run(1, {"a": [0, 0.5], "b": [1, 1], "c": [0, 0]}, {"a": [1, 1], "b": [1, 1], "d": [1, 1]})
    assert le.diffs(r, 1) == [0.5, 0.0] and le.diffs(r, 0) == [1, 0]


def test_the_report_shows_each_seed_the_pooled_difference_and_the_skills():
    runs = [_run(42, {"a": [0, 0], "b": [0, 0.5]}, {"a": [1, 1], "b": [1, 1]}), _run(43, {"a": [1, 1]}, {"a": [1, 1]})]
    text = le.report(runs)
    assert "| 42 | 0.500 [0.200, 0.800] n=2 |" in text
    assert "+0.750 [+0.500, +1.000] n=2 (better 2, worse 0)" in text  # seed 42's soft difference
    assert "pooled over seeds (task x seed pairs): soft +0.500" in text and "n=3" in text
    assert "rule of seed 42" in text and "rule of seed 43" in text and "1,234 (10)" in text
