"""The house-style example: every task can be passed, its hidden tests follow the three house conventions, no
prompt states them, and the local experiment composes on it with a fixed 12/8/16 split."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from skillopt_ray import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "house-style"
CHECK = Path(__file__).resolve().parents[2] / "examples" / "python-functions" / "check.py"
TASKS = [json.loads(line) for line in (EXAMPLE / "tasks.jsonl").read_text().splitlines() if line.strip()]


def reference_sources() -> dict[str, str]:
    """Each reference function's source, with the module's imports, as a reply's code block would carry it."""
    text = (EXAMPLE / "reference.py").read_text()
    tree = ast.parse(text)
    imports = "\n".join(
        ast.get_source_segment(text, n) or "" for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
    )
    return {
        n.name: imports + "\n\n" + (ast.get_source_segment(text, n) or "")
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
    }


def leaves(value):
    """Every scalar inside a JSON value (dict keys included)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def test_the_tasks_file_is_what_make_tasks_writes(tmp_path):
    script = (EXAMPLE / "make_tasks.py").read_text()
    assert len(TASKS) == 36 == len({t["id"] for t in TASKS})
    assert script.count('("') >= 36 and "tasks.jsonl" in script


def test_every_task_has_a_reference_solution():
    assert set(reference_sources()) == {t["metadata"]["function"] for t in TASKS}


def run_check(tmp_path: Path, task: dict, code: str) -> list[str]:
    (tmp_path / "task.json").write_text(json.dumps(task))
    (tmp_path / "reply.txt").write_text(f"Here it is:\n```python\n{code}\n```\n")
    p = subprocess.run(
        [sys.executable, str(CHECK), str(tmp_path / "task.json"), str(tmp_path / "reply.txt")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().splitlines()


def test_every_reference_solution_passes_its_check(tmp_path):
    sources = reference_sources()
    failed = {}
    for task in TASKS:
        lines = run_check(tmp_path, task, sources[task["metadata"]["function"]])
        if float(lines[-1]) != 1.0:
            failed[task["id"]] = lines
    assert not failed


def test_a_solution_without_the_conventions_fails_in_test_runner_words(tmp_path):
    """The plain mean: right on ordinary input, wrong on the house's empty input and rounding; the check names the
    call, what came back and what was expected, never the convention."""
    task = next(t for t in TASKS if t["id"] == "average")
    lines = run_check(tmp_path, task, "def average(numbers):\n    return sum(numbers) / len(numbers)")
    assert float(lines[-1]) == 0.5
    assert "FAIL average([1, 2, 2]) returned 1.6666666666666667, expected 1.67" in lines
    assert "FAIL average([]) raised ZeroDivisionError: division by zero" in lines
    assert not any(word in " ".join(lines).lower() for word in ("convention", "round", "house"))


@pytest.mark.parametrize("task", TASKS, ids=[t["id"] for t in TASKS])
def test_the_hidden_tests_follow_the_house_conventions(task):
    tests = task["metadata"]["tests"]
    empty = [expected for args, expected in tests if args[0] in ("", [], {})]
    assert empty == [None], "one test with an empty first argument, expecting None"
    for args, expected in tests:
        assert expected is not None or args[0] in ("", [], {}), "None only for empty input"
        for leaf in leaves(expected):
            if isinstance(leaf, float):
                assert round(leaf, 2) == leaf, f"{leaf} is not rounded to 2 decimals"
            if isinstance(leaf, str):
                assert leaf == leaf.strip(), f"{leaf!r} is not stripped"
    said = task["prompt"].lower()
    assert not any(word in said for word in ("none", "empty", "round", "decimal", "strip", "whitespace at"))


def is_long_float(x) -> bool:
    """A float a plain computation would likely not land on exactly (it has two decimals)."""
    return isinstance(x, float) and len(repr(x).split(".")[1]) == 2


def is_padded(x) -> bool:
    return isinstance(x, str) and x != x.strip()


def test_each_convention_is_exercised_beyond_empty_input():
    """Rounding and stripping are tested where a plain solution would differ, in every task type that returns
    floats or strings (so a skill has something to learn from in any split)."""
    rounded = [t["id"] for t in TASKS if any(is_long_float(x) for _, e in t["metadata"]["tests"] for x in leaves(e))]
    padded = [t["id"] for t in TASKS if any(is_padded(x) for a, _ in t["metadata"]["tests"] for x in leaves(a))]
    assert len(rounded) >= 12 and len(padded) >= 6


def test_the_house_style_experiment_composes_with_a_fixed_split():
    obj = cli.compose(["+experiment=local_house_style", "llm=local"])
    data = cli.plain(obj)
    assert (obj.experiment, data["env"]["name"]) == ("local_house_style", "custom")
    opts = data["env"]["options"]
    assert Path(data["env"]["data_dir"]).resolve() == (EXAMPLE / "tasks.jsonl").resolve()
    assert (opts["scorer"], opts["split_ratio"], opts["split_seed"]) == ("script", "3:2:4", 42)
    o = obj.optimizer
    assert (o.epochs, o.update_mode, o.gate_test, o.failure_only) == (
        1,
        "rewrite_from_suggestions",
        "paired_bootstrap",
        True,
    )


def _learning_experiment():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "learning_experiment.py"
    spec = importlib.util.spec_from_file_location("learning_experiment_h", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["learning_experiment_h"] = module
    spec.loader.exec_module(module)
    return module


def test_the_learning_script_runs_a_named_experiment_into_its_own_folder(capsys):
    le = _learning_experiment()
    assert le.main(["--experiment", "no_such_thing", "--report-only"]) == 2
    assert "no experiment 'no_such_thing' in conf/experiment/" in capsys.readouterr().err
    assert le.main(["--experiment", "local_house_style", "--report-only", "--seeds", "7"]) == 1
    assert "outputs/local_house_style/seed<N>.log" in capsys.readouterr().err
