"""SpreadsheetBench data: `dataset.json` plus one folder of workbooks per task, and the splits.

Two layouts are read: the original release (`{k}_{id}_input.xlsx` / `{k}_{id}_answer.xlsx`,
several test cases) and the Verified-400 layout SkillOpt uses (`{k}_{id}_init.xlsx` /
`{k}_{id}_golden.xlsx`, one case), falling back to `initial.xlsx` / `golden.xlsx`. Ids may be
ints or strings. A task whose workbooks are missing is still returned, carrying a `problem`
that its episode reports: one broken task must not stop a run.

Splits: `env.manifest_dir` (train/ val/ test/ items.json) wins; otherwise,
on real data, SkillOpt's paper split (80/40/280 Verified-400 ids, shipped in `splits/`), with
ids the data lacks left out and reported; a stable 20/10/70 hash split only for data that holds
none of the paper's ids. `valid_seen`/`selection` mean val and `valid_unseen` means test.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.base import DataError, Task, manifest_entries, read_json_list
from skillopt_envs.kit import SPLIT_ALIASES as ALIASES  # noqa: F401 - re-exported
from skillopt_envs.kit import SPLITS, split_name
from skillopt_envs.spreadsheetbench.scoring import effective_position

PAPER_MANIFEST = Path(__file__).resolve().parent / "splits"
PAPER_SIZES = {"train": 80, "val": 40, "test": 280}
_PAIRS = (("_input.xlsx", "_answer.xlsx"), ("_init.xlsx", "_golden.xlsx"))


def resolve_root(data_dir: Optional[str]) -> Optional[Path]:
    raw = data_dir or os.environ.get("SPREADSHEETBENCH_DATA")
    if not raw:
        return None
    root = Path(os.path.expandvars(os.path.expanduser(raw))).resolve()
    if not (root / "dataset.json").is_file():
        raise DataError(
            f"SpreadsheetBench dataset {root / 'dataset.json'} not found; set env.data_dir or SPREADSHEETBENCH_DATA "
            "to the folder holding dataset.json and spreadsheet/"
        )
    return root


def find_cases(folder: Path, task_id: str = "") -> list[tuple[str, str]]:
    """(input, answer) workbook pairs in the reference's discovery order: the sorted `*_input.xlsx`
    with their `*_answer.xlsx`, then the sorted `*_init.xlsx` with their `*_golden.xlsx`; with
    neither, `initial.xlsx` + `golden.xlsx`. An input without its answer is ignored."""
    if not folder.is_dir():
        return []
    names = {f.name for f in folder.iterdir() if f.is_file()}
    cases = []
    for inp_suffix, ans_suffix in _PAIRS:
        for name in sorted(n for n in names if n.endswith(inp_suffix)):
            answer = name[: -len(inp_suffix)] + ans_suffix
            if answer in names:
                cases.append((str(folder / name), str(folder / answer)))
    if not cases and {"initial.xlsx", "golden.xlsx"} <= names:
        cases.append((str(folder / "initial.xlsx"), str(folder / "golden.xlsx")))
    return cases


def case_number(path: str) -> str:
    """A case's number: the file name before its first `_` ("1" for initial.xlsx)."""
    name = Path(path).name
    return name.split("_", 1)[0] if "_" in name else "1"


def task_type_of(instruction_type: str) -> str:
    """The reference's rule: lower-cased, contains "cell" -> cell_level, else "sheet" -> sheet_level, else other."""
    low = (instruction_type or "").lower()
    return "cell_level" if "cell" in low else "sheet_level" if "sheet" in low else "other"


def task_from_row(root: Path, row: dict[str, Any]) -> Task:
    if not isinstance(row, dict):
        raise DataError(
            f"{root / 'dataset.json'}: a row is a JSON {type(row).__name__} ({str(row)[:60]}), not an object with "
            "id, instruction, answer_position; point env.data_dir at a SpreadsheetBench release"
        )
    for key in ("id", "instruction", "answer_position"):
        if key not in row:
            raise DataError(f"{root / 'dataset.json'}: a row lacks {key!r} (row: {str(row)[:120]})")
    task_id = str(row["id"])
    folder = root / str(row.get("spreadsheet_path") or f"spreadsheet/{task_id}")
    cases = find_cases(folder, task_id)
    problem = "" if cases else f"no-test-cases: no input/answer workbooks for task {task_id} in {folder}"
    kind = str(row.get("instruction_type") or "")
    sheet = row.get("answer_sheet")
    payload = {
        "id": task_id,
        "instruction": row["instruction"],
        "instruction_type": kind,
        "answer_position": str(row["answer_position"] or ""),
        "answer_sheet": str(sheet) if sheet else "",
        "position": effective_position(str(row["answer_position"] or ""), sheet),
        "cases": cases,
        "problem": problem,
    }
    return Task(task_id, task_type_of(kind), payload)


def load_dataset(root: Path) -> list[Task]:
    rows = read_json_list(root / "dataset.json", "point env.data_dir at a SpreadsheetBench release")
    if not rows:
        raise DataError(f"{root / 'dataset.json'} holds no tasks; point env.data_dir at a SpreadsheetBench release")
    return [task_from_row(root, r) for r in rows]


def _hash_split(task_id: str) -> str:
    """A stable 20/10/70 train/val/test split for data the paper split does not fit (SkillOpt's is 80/40/280)."""
    h = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % 10
    return "train" if h < 2 else "val" if h < 3 else "test"


def canonical_split(split: str) -> str:
    return split if split == "all" else split_name(split, "SpreadsheetBench")


def manifest_ids(manifest_dir: Path, split: str) -> list[str]:
    path = manifest_dir / split / "items.json"
    if not path.is_file():
        raise DataError(f"manifest {path} not found; env.manifest_dir must hold train/ val/ test/ items.json")
    fix = 'a SpreadsheetBench manifest is a JSON list of {"id": ...} objects'
    return [str(item["id"]) for item in manifest_entries(path, ("id",), fix)]


@dataclass
class SplitPlan:
    """Where the splits come from and how they fit the data."""

    source: str  # manifest | paper | hash
    manifest: Optional[Path]
    strict: bool  # missing ids are an error (an explicit manifest without skip_missing_tasks)
    sizes: dict[str, int] = field(default_factory=dict)  # tasks per split found in the data
    listed: dict[str, int] = field(default_factory=dict)  # ids per split in the manifest

    def describe(self) -> str:
        got = "/".join(str(self.sizes.get(s, 0)) for s in SPLITS)
        if self.source == "hash":
            return (
                f"split: stable 20/10/70 hash split ({got} train/val/test) - the data holds none of the ids of SkillOpt's "
                "paper split (80/40/280); give env.manifest_dir to choose tasks"
            )
        listed = "/".join(str(self.listed.get(s, 0)) for s in SPLITS)
        name = "SkillOpt's paper split" if self.source == "paper" else f"manifest {self.manifest}"
        text = f"split: {name}, {got} train/val/test tasks"
        if self.source == "paper" and self.sizes != PAPER_SIZES:
            missing = sum(self.listed.values()) - sum(self.sizes.values())
            text += (
                f" - DIFFERS from the paper's 80/40/280: {missing} of its ids are not in the data, so scores are not "
                "comparable with the paper's"
            )
        elif self.sizes != self.listed:
            text += f" ({listed} listed; ids missing from the data are left out)"
        return text


def plan_splits(root: Path, tasks: list[Task], manifest_dir: Optional[str], skip_missing: bool) -> SplitPlan:
    have = {t.task_id for t in tasks}
    if manifest_dir:
        plan = SplitPlan("manifest", Path(manifest_dir).expanduser(), strict=not skip_missing)
    else:
        plan = SplitPlan("paper", PAPER_MANIFEST, strict=False)
        if not any(i in have for s in SPLITS for i in manifest_ids(PAPER_MANIFEST, s)):
            plan = SplitPlan("hash", None, strict=False)
    for s in SPLITS:
        if plan.manifest is None:
            plan.sizes[s] = sum(1 for t in tasks if _hash_split(t.task_id) == s)
        else:
            ids = (
                manifest_ids(plan.manifest, s) if (plan.manifest / s / "items.json").is_file() else []
            )  # select() reports it
            plan.listed[s] = len(ids)
            plan.sizes[s] = sum(1 for i in ids if i in have)
    return plan


def select(root: Path, tasks: list[Task], plan: SplitPlan, split: str) -> list[Task]:
    split = canonical_split(split)
    if split == "all":
        return tasks
    if plan.manifest is None:
        chosen = [t for t in tasks if _hash_split(t.task_id) == split]
        if not chosen:
            raise DataError(f"the {split} split of {root} is empty; give env.manifest_dir or use a larger dataset")
        return chosen
    path = plan.manifest / split / "items.json"
    by_id = {t.task_id: t for t in tasks}
    ids = manifest_ids(plan.manifest, split)
    missing = [i for i in ids if i not in by_id]
    if missing and plan.strict:
        raise DataError(
            f"{len(missing)} of {len(ids)} tasks in {path} are not in {root / 'dataset.json'} (first: {missing[0]}); "
            "use the matching release or set env.options.skip_missing_tasks=true"
        )
    chosen = [by_id[i] for i in ids if i in by_id]
    if not chosen:
        raise DataError(
            f"none of the tasks in {path} are in {root / 'dataset.json'}; give env.manifest_dir with a split of this data"
        )
    return chosen


def load_split(root: Path, manifest_dir: Optional[str], split: str, skip_missing: bool) -> list[Task]:
    tasks = load_dataset(root)
    return select(root, tasks, plan_splits(root, tasks, manifest_dir, skip_missing), split)
