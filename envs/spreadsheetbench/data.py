"""SpreadsheetBench data: `dataset.json` plus one folder of workbooks per task.

Two layouts are read: the original release (`{k}_{id}_input.xlsx` / `{k}_{id}_answer.xlsx`,
several test cases) and the Verified-400 layout SkillOpt uses (`{k}_{id}_init.xlsx` /
`{k}_{id}_golden.xlsx`, one case). Ids may be ints or strings. A task whose workbooks are
missing is still returned, carrying a `problem` that its episode reports: one broken task
must not stop a run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Optional

from envs.base import DataError, Task

SPLITS = ("train", "val", "test")
_CASE = re.compile(r"^(\d+)_(.+)_(input|answer|init|golden)\.xlsx$")
_PAIR = {"input": "answer", "init": "golden"}


def resolve_root(data_dir: Optional[str]) -> Optional[Path]:
    raw = data_dir or os.environ.get("SPREADSHEETBENCH_DATA")
    if not raw:
        return None
    root = Path(os.path.expandvars(os.path.expanduser(raw))).resolve()
    if not (root / "dataset.json").is_file():
        raise DataError(f"SpreadsheetBench dataset {root / 'dataset.json'} not found; set env.data_dir or SPREADSHEETBENCH_DATA "
                        "to the folder holding dataset.json and spreadsheet/")
    return root


def find_cases(folder: Path, task_id: str) -> list[tuple[str, str]]:
    """(input, answer) workbook pairs in case order."""
    if not folder.is_dir():
        return []
    found: dict[tuple[int, str], str] = {}
    for f in folder.iterdir():
        m = _CASE.match(f.name)
        if m and m.group(2) == task_id:
            found[(int(m.group(1)), m.group(3))] = str(f)
    cases = []
    for (k, kind), path in sorted(found.items()):
        if kind in _PAIR and (k, _PAIR[kind]) in found:
            cases.append((path, found[(k, _PAIR[kind])]))
    return cases


def task_from_row(root: Path, row: dict[str, Any]) -> Task:
    for key in ("id", "instruction", "answer_position"):
        if key not in row:
            raise DataError(f"{root / 'dataset.json'}: a row lacks {key!r} (row: {str(row)[:120]})")
    task_id = str(row["id"])
    folder = root / str(row.get("spreadsheet_path") or f"spreadsheet/{task_id}")
    cases = find_cases(folder, task_id)
    problem = "" if cases else f"no input/answer workbooks for task {task_id} in {folder}"
    kind = str(row.get("instruction_type") or "Unknown")
    task_type = "cell" if kind.lower().startswith("cell") else "sheet" if kind.lower().startswith("sheet") else kind
    payload = {"id": task_id, "instruction": row["instruction"], "instruction_type": kind,
               "answer_position": str(row["answer_position"]), "cases": cases, "problem": problem}
    return Task(task_id, task_type, payload)


def load_dataset(root: Path) -> list[Task]:
    try:
        rows = json.loads((root / "dataset.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {root / 'dataset.json'}: {e}") from None
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{root / 'dataset.json'} holds no tasks; point env.data_dir at a SpreadsheetBench release")
    return [task_from_row(root, r) for r in rows]


def _hash_split(task_id: str) -> str:
    """A stable 20/10/70 train/val/test split when no manifest is given (SkillOpt's is 80/40/280)."""
    h = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % 10
    return "train" if h < 2 else "val" if h < 3 else "test"


def load_split(root: Path, manifest_dir: Optional[str], split: str, skip_missing: bool) -> list[Task]:
    tasks = load_dataset(root)
    if split == "all":
        return tasks
    if split not in SPLITS:
        raise DataError(f"unknown SpreadsheetBench split {split!r}; use train, val, test or all")
    if not manifest_dir:
        chosen = [t for t in tasks if _hash_split(t.task_id) == split]
        if not chosen:
            raise DataError(f"the {split} split of {root} is empty; give env.manifest_dir or use a larger dataset")
        return chosen
    path = Path(manifest_dir).expanduser() / split / "items.json"
    if not path.is_file():
        raise DataError(f"manifest {path} not found; env.manifest_dir must hold train/ val/ test/ items.json")
    by_id = {t.task_id: t for t in tasks}
    ids = [str(item["id"]) for item in json.loads(path.read_text(encoding="utf-8"))]
    missing = [i for i in ids if i not in by_id]
    if missing and not skip_missing:
        raise DataError(f"{len(missing)} of {len(ids)} tasks in {path} are not in {root / 'dataset.json'} (first: {missing[0]}); "
                        "use the matching release or set env.options.skip_missing_tasks=true")
    chosen = [by_id[i] for i in ids if i in by_id]
    if not chosen:
        raise DataError(f"none of the tasks in {path} are in {root / 'dataset.json'}")
    return chosen
