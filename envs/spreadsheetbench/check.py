"""Find SpreadsheetBench tasks that no script can pass, before a run spends money on them.

    python -m skillopt_envs.spreadsheetbench.check DATA_DIR [--manifest DIR] [--json]

A task is defective when its answer position cannot be parsed, names a sheet its answer
workbook lacks, it has no test-case files at all (or a workbook that cannot be opened), or two of
its test cases have identical inputs (cached values, formulas, cell formats and merged ranges) but
different expected answers. Each defective task is listed with the reason and the rule that makes
it defective: `data` (no script can pass it under any scorer) or `reference` (the reference's
scoring makes it unpassable: it puts `answer_sheet` in front of a position without `!`, which the
official scorer does not do). Then the counts per split of the split the run would use (the paper
split by default, `--manifest` as `env.manifest_dir`). Exclude them with a manifest of your own.
Tasks of the original release with fewer than its 3 test cases (an input without its answer, say)
can still be passed: they are listed after the defects, as notes.

Results are cached per task under ~/.cache/skillopt_ray/spreadsheetbench_check (keyed by the
files' sizes and modification times), so the run's start-up note costs little after the first time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.base import DataError, Task
from skillopt_envs.spreadsheetbench import data as sb_data
from skillopt_envs.spreadsheetbench.scoring import Area, PositionError, cells_equal, parse_position

warnings.filterwarnings("ignore", category=UserWarning, module="openpyxl")  # unsupported extensions in real workbooks

KINDS = ("unparsable-position", "missing-sheet", "no-test-cases", "unreadable-workbook", "conflicting-cases")
# why a task is defective: its data (any scorer), or the reference's rule of putting answer_sheet in front of a
# position without `!` (kept here as the reference does; the official SpreadsheetBench scorer does not)
RULES = {
    "data": "no script can pass it under any scorer",
    "reference": "the reference's scoring, which puts answer_sheet in front of a position without '!', makes it "
    "unpassable; the official scorer, which does not, may pass it",
}
_VERSION = 2
_RELEASE_CASES = 3  # the original release's test cases per task (Verified-400 has one)


@dataclass
class Defect:
    task_id: str
    kind: str  # one of KINDS
    detail: str
    rule: str = "data"  # one of RULES


def _cache_dir() -> Path:
    return (
        Path(os.environ.get("SKILLOPT_CACHE_DIR", Path.home() / ".cache" / "skillopt_ray")) / "spreadsheetbench_check"
    )


def _task_key(task: Task) -> str:
    p = task.payload
    parts: list[Any] = [_VERSION, p["id"], p["position"]]
    for pair in p["cases"]:
        for f in pair:
            try:
                st = os.stat(f)
                parts.append([f, st.st_size, st.st_mtime_ns])
            except OSError:
                parts.append([f, None])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _values(path: str, sheets_cells: Optional[dict[str, tuple[str, ...]]]) -> tuple[list[str], dict[str, Any]]:
    """(sheet names, values): the named cells, or every non-empty cell of every sheet when None."""
    import openpyxl

    wb = openpyxl.load_workbook(path, data_only=True, read_only=sheets_cells is None)
    try:
        out: dict[str, Any] = {}
        if sheets_cells is None:
            for ws in wb.worksheets:
                for row in ws.iter_rows():
                    for c in row:
                        if c.value is not None and getattr(c, "coordinate", None):
                            out[f"{ws.title}!{c.coordinate}"] = c.value
        else:
            for sheet, cells in sheets_cells.items():
                if sheet in wb.sheetnames:
                    out.update({f"{sheet}!{c}": wb[sheet][c].value for c in cells})
        return list(wb.sheetnames), out
    finally:
        wb.close()


def _content(path: str) -> Any:
    """What a script can read in an input workbook beyond cached values: sheet names, merged ranges, and per cell
    its literal value or formula and its format (number format, font, fill, border, alignment, protection)."""
    import openpyxl

    wb = openpyxl.load_workbook(path, data_only=False)
    try:
        out = []
        for ws in wb.worksheets:
            cells = []
            for row in ws.iter_rows():
                for c in row:
                    if c.value is None and not c.has_style:
                        continue
                    style = (
                        (c.number_format, c.font, c.fill, c.border, c.alignment, c.protection) if c.has_style else ()
                    )
                    cells.append((c.coordinate, c.value, style))
            out.append((ws.title, sorted(str(r) for r in ws.merged_cells.ranges), cells))
        return out
    finally:
        wb.close()


def _same_input(a: str, b: str) -> bool:
    """Two input workbooks a script cannot tell apart: the same cached values, formulas and formats."""
    return _values(a, None) == _values(b, None) and _content(a) == _content(b)


def _sheetnames(path: str) -> list[str]:
    import openpyxl

    wb = openpyxl.load_workbook(path, read_only=True)
    try:
        return list(wb.sheetnames)
    finally:
        wb.close()


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_task(task: Task) -> Optional[Defect]:
    """The task's first defect, or None when a script could pass it."""
    p = task.payload
    tid = task.task_id
    if not p["cases"]:
        return Defect(tid, "no-test-cases", p.get("problem") or "no input/answer workbooks")
    prefixed = p["position"] != p.get("answer_position", p["position"])  # answer_sheet was put in front
    try:
        areas = parse_position(p["position"])
    except PositionError as e:
        return Defect(tid, "unparsable-position", f"{p['position']!r}: {e}", _rule_of(p) if prefixed else "data")
    answers = _answer_cells(tid, p, areas, prefixed)
    if isinstance(answers, Defect):
        return answers
    if len(p["cases"]) < 2:
        return None
    return _conflicting_cases(tid, p, answers)


def _answer_cells(
    tid: str, p: dict[str, Any], areas: list[Area], prefixed: bool
) -> list[dict[str, tuple[str, ...]]] | Defect:
    """Per case, the answer cells by sheet; a defect when an answer workbook is unreadable or lacks a named sheet."""
    answers = []
    for _inp, ans in p["cases"]:
        try:
            names = _sheetnames(ans)
        except Exception as e:  # noqa: BLE001 - corrupt workbooks raise many kinds of errors
            return Defect(tid, "unreadable-workbook", f"{Path(ans).name}: {type(e).__name__}: {str(e)[:120]}")
        first = names[0] if names else ""
        want: dict[str, tuple[str, ...]] = {}
        for a in areas:
            sheet = a.sheet if a.sheet is not None else first
            if sheet not in names:
                from_prefix = prefixed and a is areas[0] and sheet == p.get("answer_sheet")
                return Defect(
                    tid,
                    "missing-sheet",
                    f"{p['position']!r} names sheet {sheet!r}; {Path(ans).name} has {names}",
                    _rule_of(p) if from_prefix else "data",
                )
            want[sheet] = want.get(sheet, ()) + a.cells
        answers.append(want)
    return answers


def _conflicting_cases(tid: str, p: dict[str, Any], answers: list[dict[str, tuple[str, ...]]]) -> Optional[Defect]:
    """Two cases whose inputs a script cannot tell apart but whose answers differ (or an unreadable input)."""
    inputs: list[Optional[str]] = []
    for inp, _ans in p["cases"]:
        try:
            inputs.append(_digest(inp))
        except OSError as e:
            return Defect(tid, "unreadable-workbook", f"{Path(inp).name}: {e}")
    for i in range(len(p["cases"])):
        for j in range(i + 1, len(p["cases"])):
            same = inputs[i] == inputs[j]
            if not same:
                try:
                    same = _same_input(p["cases"][i][0], p["cases"][j][0])
                except Exception as e:  # noqa: BLE001
                    return Defect(
                        tid,
                        "unreadable-workbook",
                        f"{Path(p['cases'][i][0]).name} or {Path(p['cases'][j][0]).name}: {type(e).__name__}: "
                        f"{str(e)[:120]}",
                    )
            if not same:
                continue
            (_, a), (_, b) = _values(p["cases"][i][1], answers[i]), _values(p["cases"][j][1], answers[j])
            diff = [ref for ref in a if not cells_equal(a[ref], b.get(ref))]
            if diff:
                ci, cj = sb_data.case_number(p["cases"][i][0]), sb_data.case_number(p["cases"][j][0])
                return Defect(
                    tid,
                    "conflicting-cases",
                    f"cases {ci} and {cj} have identical inputs but different answers "
                    f"({len(diff)} cells, first {diff[0]}: {a[diff[0]]!r} vs {b.get(diff[0])!r})",
                )
    return None


def _rule_of(payload: dict[str, Any]) -> str:
    """`reference` when the position read as given (without answer_sheet in front) parses; else `data`."""
    try:
        parse_position(payload.get("answer_position", ""))
    except PositionError:
        return "data"
    return "reference"


def case_notes(tasks: Iterable[Task]) -> list[str]:
    """Tasks of the original release (`*_input.xlsx` / `*_answer.xlsx`) with fewer than its 3 test cases: still
    passable, but scored on fewer cases (an input whose answer is missing is not a case)."""
    out = []
    for t in tasks:
        cases = t.payload["cases"]
        if cases and all(inp.endswith("_input.xlsx") for inp, _ in cases) and len(cases) < _RELEASE_CASES:
            folder = Path(cases[0][0]).parent
            unpaired = sorted(
                f.name
                for f in folder.glob("*.xlsx")
                if f.name.endswith(("_input.xlsx", "_answer.xlsx")) and str(f) not in {x for c in cases for x in c}
            )
            extra = f"; unpaired: {', '.join(unpaired)}" if unpaired else ""
            out.append(f"{t.task_id}: {len(cases)} of {_RELEASE_CASES} test cases{extra}")
    return out


def check_tasks(tasks: Iterable[Task], use_cache: bool = True) -> list[Defect]:
    """Defects of `tasks`, in task order; per-task results are cached on disk."""
    cache = _cache_dir()
    out = []
    for t in tasks:
        key = _task_key(t)
        path = cache / key[:2] / f"{key}.json"
        hit = None
        if use_cache and path.is_file():
            try:
                hit = json.loads(path.read_text())
            except (OSError, ValueError):
                hit = None
        if hit is None:
            d = check_task(t)
            hit = {"defect": asdict(d) if d else None}
            if use_cache:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
                    with os.fdopen(fd, "w") as f:
                        json.dump(hit, f)
                    os.replace(tmp, path)
                except OSError:
                    pass
        if hit["defect"]:
            out.append(Defect(**hit["defect"]))
    return out


def split_counts(
    root: Path, tasks: list[Task], plan: sb_data.SplitPlan, defects: list[Defect]
) -> dict[str, tuple[int, int]]:
    """split -> (defective, tasks) for the run's split plan."""
    bad = {d.task_id for d in defects}
    out = {}
    for s in sb_data.SPLITS:
        try:
            chosen = sb_data.select(root, tasks, plan, s)
        except DataError:
            chosen = []
        out[s] = (sum(1 for t in chosen if t.task_id in bad), len(chosen))
    return out


def summary_note(root: Path, tasks: list[Task], plan: sb_data.SplitPlan) -> str:
    """The start-up note's part on defects of the run's splits."""
    in_splits = {t.task_id: t for s in sb_data.SPLITS for t in _safe_select(root, tasks, plan, s)}
    defects = check_tasks(in_splits.values())
    if not defects:
        return f"no defective tasks in the splits ({len(in_splits)} checked)"
    kinds = Counter(d.kind for d in defects)
    counts = split_counts(root, tasks, plan, defects)
    per = "/".join(str(counts[s][0]) for s in sb_data.SPLITS)
    by_reference = sum(1 for d in defects if d.rule == "reference")
    return (
        f"{len(defects)} of the {len(in_splits)} tasks in the splits are defective ({per} train/val/test: "
        + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        + ")"
        + (f", {by_reference} of them only by the reference's answer_sheet rule" if by_reference else "")
        + f"; they score 0 or data_error - list them with python -m skillopt_envs.spreadsheetbench.check {root}"
    )


def _safe_select(root: Path, tasks: list[Task], plan: sb_data.SplitPlan, split: str) -> list[Task]:
    try:
        return sb_data.select(root, tasks, plan, split)
    except DataError:
        return []


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m skillopt_envs.spreadsheetbench.check", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("data_dir", help="the folder holding dataset.json and spreadsheet/")
    ap.add_argument(
        "--manifest", default=None, help="split manifest folder (as env.manifest_dir); default: the paper split"
    )
    ap.add_argument("--json", action="store_true", help="print the defects as JSON")
    ap.add_argument("--no-cache", action="store_true", help="recheck every task")
    a = ap.parse_args(argv)
    try:
        root = sb_data.resolve_root(a.data_dir)
        assert root is not None
        tasks = sb_data.load_dataset(root)
        plan = sb_data.plan_splits(root, tasks, a.manifest, skip_missing=True)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    defects = check_tasks(tasks, use_cache=not a.no_cache)
    if a.json:
        print(json.dumps([asdict(d) for d in defects], indent=1))
        return 0
    n_cases = sum(len(t.payload["cases"]) for t in tasks)
    print(f"SpreadsheetBench data check: {root} ({len(tasks)} tasks, {n_cases} test cases)")
    for d in defects:
        print(f"  {d.task_id}\t{d.kind}\t{d.detail}\t[rule: {d.rule}]")
    kinds = Counter(d.kind for d in defects)
    print(
        f"defective: {len(defects)} of {len(tasks)} tasks"
        + (" (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")" if defects else "")
    )
    for rule, n in sorted(Counter(d.rule for d in defects).items()):
        print(f"  rule {rule}: {n} ({RULES[rule]})")
    notes = case_notes(tasks)
    if notes:
        print(f"fewer test cases than the release's {_RELEASE_CASES} (not defective, scored on the cases present):")
        for line in notes:
            print(f"  {line}")
    print(plan.describe())
    for s, (bad, n) in split_counts(root, tasks, plan, defects).items():
        print(f"  {s}: {bad} of {n} tasks defective")
    return 0


if __name__ == "__main__":
    sys.exit(main())
