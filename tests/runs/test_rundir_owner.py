"""RunDir is the only code that names run-directory files: the tools that read runs (report, compare, sweep,
tracking, transfer, the dashboard, the CLI, the driver, the sleep wing) go through its readers and writers, so a file's name or
layout changes in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import skillopt_ray
from skillopt_ray.runs import rundir

PACKAGE = Path(skillopt_ray.__file__).parent
READERS = [
    "runs/report.py",
    "compare/command.py",
    "compare/groups.py",
    "compare/records.py",
    "compare/render.py",
    "compare/stats.py",
    "sweep/command.py",
    "sweep/report.py",
    "sweep/trials.py",
    "sweep/tune.py",
    "runs/tracking.py",
    "compare/transfer.py",
    "runs/progress.py",
    "engine/driver.py",
]
READER_DIRS = ["dashboard", "cli", "sleep", "sleep/night", "sleep/proposal"]
# Pieces of the names RunDir builds from a number (skills/skill_v0003.md, steps/e01_s002, final/eval_test_...).
PATTERN_PIECES = ("skills/skill_v", "steps/e", "epochs/e", "final/eval_", "_results.json")
# Names that are not a run's file where they appear.
NOT_A_RUN_FILE = {("sweep/tune.py", "embedded_server.log")}  # the sweep folder's shared model server log


def run_dir_names() -> set[str]:
    """Every file name rundir.py defines as a module constant (config.yaml, state.json, ...)."""
    return {
        v for k, v in vars(rundir).items() if k.isupper() and isinstance(v, str) and "." in v and not v.startswith(".")
    }


def reader_files() -> list[Path]:
    files = [PACKAGE / f for f in READERS]
    for d in READER_DIRS:
        files += sorted((PACKAGE / d).glob("*.py"))
    return files


def string_literals(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module's code (docstrings left out: prose may name a file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_rundir_defines_the_names_this_test_looks_for():
    names = run_dir_names()
    assert {"state.json", "history.jsonl", "summary.json", "config.yaml", "progress.json", "identity.json"} <= names


def test_no_reader_names_a_run_directory_file():
    names = run_dir_names()
    found = []
    for path in reader_files():
        for line, text in string_literals(path):
            hits = [n for n in names if n in text and (path.relative_to(PACKAGE).as_posix(), n) not in NOT_A_RUN_FILE]
            hits += [p for p in PATTERN_PIECES if p in text]
            if hits:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r} names {hits}")
    assert not found, "run-directory file names outside rundir.py (use a RunDir method):\n" + "\n".join(found)


def test_the_scan_sees_a_file_name_in_code_and_not_in_a_docstring(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('"""Reads state.json."""\n\ndef f(rd):\n    """The summary.json."""\n    return rd / "gate.json"\n')
    assert [t for _, t in string_literals(src)] == ["gate.json"]
