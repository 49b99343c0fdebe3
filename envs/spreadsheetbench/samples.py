"""Built-in sample tasks in the original SpreadsheetBench layout, generated with openpyxl.

Each task has three test cases (same layout, different data), so a script that hard-codes
one case's values fails the others, as in the real benchmark. `SOLUTIONS` holds a correct
script per task template: tests use it as a scripted target, and generation checks nothing
else because the answers are computed by the same rule the instruction states.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import openpyxl
from skillopt_envs.kit import ensure_samples, samples_root

MADE_BY = "skillopt_ray skillopt_envs.spreadsheetbench.samples"  # the sample folder's COMPLETE marker says who wrote it

Rows = list[list[Any]]


@dataclass(frozen=True)
class Template:
    name: str
    kind: str  # Cell-Level Manipulation | Sheet-Level Manipulation
    instruction: str
    answer_position: str
    make: Callable[[random.Random], tuple[Rows, Callable[[openpyxl.Workbook], None]]]


N = 10  # data rows per sheet


def _names(rng: random.Random, k: int) -> list[str]:
    first = ["Ana", "Ben", "Chen", "Dina", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jia", "Kofi", "Lena", "Milo", "Nia"]
    return rng.sample(first, k)


def _total(rng: random.Random):
    rows: list[list[Any]] = [["Item", "Quantity"]] + [[f"Part-{i}", rng.randint(1, 90)] for i in range(N)]
    return rows, lambda wb: wb.active.cell(2, 4, sum(r[1] for r in rows[1:]))


def _upper(rng: random.Random):
    rows: list[list[Any]] = [["Name", "Upper"]] + [
        [n.lower() + " " + rng.choice(["smith", "ng", "okoro"]), None] for n in _names(rng, N)
    ]

    def fill(wb):
        for i, r in enumerate(rows[1:], start=2):
            wb.active.cell(i, 2, r[0].upper())

    return rows, fill


def _margin(rng: random.Random):
    rows: list[list[Any]] = [["Product", "Sales", "Cost", "Margin"]]
    for i in range(N):
        sales = rng.randint(100, 999)
        rows.append([f"P{i}", sales, rng.randint(10, sales), None])

    def fill(wb):
        for i, r in enumerate(rows[1:], start=2):
            wb.active.cell(i, 4, round((r[1] - r[2]) / r[1], 2))

    return rows, fill


def _count_at_least(rng: random.Random):
    rows: list[list[Any]] = [["Student", "Score"]] + [[n, rng.randint(20, 100)] for n in _names(rng, N)]
    return rows, lambda wb: wb.active.cell(2, 5, sum(1 for r in rows[1:] if r[1] >= 50))


def _fullname(rng: random.Random):
    last = ["Park", "Silva", "Haddad", "Novak", "Okafor", "Ito", "Rossi", "Berg", "Khan", "Lopez", "Moreau", "Singh"]
    rows: list[list[Any]] = [["First", "Last", "Full"]] + [[f, rng.choice(last), None] for f in _names(rng, N)]

    def fill(wb):
        for i, r in enumerate(rows[1:], start=2):
            wb.active.cell(i, 3, f"{r[1]}, {r[0]}")

    return rows, fill


def _days(rng: random.Random):
    rows: list[list[Any]] = [["Start", "End", "Days"]]
    for _ in range(N):
        start = dt.datetime(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 300))
        rows.append([start, start + dt.timedelta(days=rng.randint(1, 60)), None])

    def fill(wb):
        for i, r in enumerate(rows[1:], start=2):
            wb.active.cell(i, 3, (r[1] - r[0]).days)

    return rows, fill


def _filter_region(rng: random.Random):
    rows: list[list[Any]] = [["Order", "Region", "Amount"]] + [
        [1000 + i, rng.choice(["North", "South", "East"]), rng.randint(5, 500)] for i in range(N)
    ]

    def fill(wb):
        ws = wb.create_sheet("North")
        kept = [rows[0]] + [r for r in rows[1:] if r[1] == "North"]
        for i, r in enumerate(kept, start=1):
            for j, v in enumerate(r, start=1):
                ws.cell(i, j, v)

    return rows, fill


def _sort_desc(rng: random.Random):
    rows: list[list[Any]] = [["City", "Population"]] + [
        [c, rng.randint(1000, 99999)]
        for c in rng.sample(
            ["Oslo", "Lima", "Pune", "Kyiv", "Accra", "Quito", "Hanoi", "Porto", "Cork", "Riga", "Bern", "Doha"], N
        )
    ]

    def fill(wb):
        ordered = sorted(rows[1:], key=lambda r: r[1], reverse=True)
        for i, r in enumerate(ordered, start=2):
            wb.active.cell(i, 1, r[0])
            wb.active.cell(i, 2, r[1])

    return rows, fill


TEMPLATES = [
    Template(
        "total",
        "Cell-Level Manipulation",
        "Sheet1 lists parts in column A and quantities in column B (header in row 1). "
        "Put the total quantity in cell D2.",
        "D2",
        _total,
    ),
    Template(
        "upper",
        "Cell-Level Manipulation",
        "Column A holds names (header in row 1). Write each name in upper case in column B next to it.",
        f"B2:B{N + 1}",
        _upper,
    ),
    Template(
        "margin",
        "Cell-Level Manipulation",
        "Columns B and C hold sales and cost. In column D write the profit margin "
        "(sales minus cost, divided by sales), rounded to 2 decimals.",
        f"D2:D{N + 1}",
        _margin,
    ),
    Template(
        "count",
        "Cell-Level Manipulation",
        "Column B holds scores. Put in cell E2 how many scores are 50 or more.",
        "E2",
        _count_at_least,
    ),
    Template(
        "fullname",
        "Cell-Level Manipulation",
        "Column A has first names and column B last names. Fill column C with 'Last, First' for each row.",
        f"C2:C{N + 1}",
        _fullname,
    ),
    Template(
        "days",
        "Cell-Level Manipulation",
        "Columns A and B hold start and end dates. Fill column C with the number of days from start to end.",
        f"C2:C{N + 1}",
        _days,
    ),
    Template(
        "north",
        "Sheet-Level Manipulation",
        "Copy the header and every row whose Region is 'North' to a new sheet named "
        "'North', starting at A1, keeping the original order.",
        f"'North'!A1:C{N + 1}",
        _filter_region,
    ),
    Template(
        "sort",
        "Sheet-Level Manipulation",
        "Sort the table on the first sheet (header in row 1) by Population, largest first, in place.",
        f"A2:B{N + 1}",
        _sort_desc,
    ),
]

_WRITE = "import os, openpyxl\nwb = openpyxl.load_workbook(os.environ['INPUT_PATH'])\nws = wb.active\n"
_SAVE = "wb.save(os.environ['OUTPUT_PATH'])\n"
SOLUTIONS = {
    "total": _WRITE + "ws['D2'] = sum(ws.cell(r, 2).value for r in range(2, ws.max_row + 1))\n" + _SAVE,
    "upper": _WRITE + "for r in range(2, ws.max_row + 1):\n    ws.cell(r, 2, ws.cell(r, 1).value.upper())\n" + _SAVE,
    "margin": _WRITE + "for r in range(2, ws.max_row + 1):\n    s, c = ws.cell(r, 2).value, ws.cell(r, 3).value\n"
    "    ws.cell(r, 4, round((s - c) / s, 2))\n" + _SAVE,
    "count": _WRITE + "ws['E2'] = sum(1 for r in range(2, ws.max_row + 1) if ws.cell(r, 2).value >= 50)\n" + _SAVE,
    "fullname": _WRITE
    + "for r in range(2, ws.max_row + 1):\n    ws.cell(r, 3, f'{ws.cell(r, 2).value}, {ws.cell(r, 1).value}')\n"
    + _SAVE,
    "days": _WRITE
    + "for r in range(2, ws.max_row + 1):\n    ws.cell(r, 3, (ws.cell(r, 2).value - ws.cell(r, 1).value).days)\n"
    + _SAVE,
    "north": _WRITE + "out = wb.create_sheet('North')\nrows = list(ws.iter_rows(values_only=True))\n"
    "for row in [rows[0]] + [r for r in rows[1:] if r[1] == 'North']:\n    out.append(list(row))\n" + _SAVE,
    "sort": _WRITE + "rows = sorted(ws.iter_rows(min_row=2, values_only=True), key=lambda r: r[1], reverse=True)\n"
    "for i, row in enumerate(rows, start=2):\n    for j, v in enumerate(row, start=1):\n        ws.cell(i, j, v)\n"
    + _SAVE,
}
# Scripts that write formulas instead of values: openpyxl stores no computed value for them, so under the official
# rule (env.options.recalculate=false) their cells read as empty; with recalculation they score by their value.
FORMULA_SOLUTIONS = {
    "count": _WRITE + "ws['E2'] = '=COUNTIF(B2:B%d,\">=50\")' % ws.max_row\n" + _SAVE,
    "days": _WRITE + "for r in range(2, ws.max_row + 1):\n    ws.cell(r, 3, f'=B{r}-A{r}')\n" + _SAVE,
}
# template -> split; a template's tasks differ only in seed, so splits share the skills to learn
SAMPLE_SPLITS = {"train": 2, "val": 1, "test": 1}  # tasks per template per split


def template_of(task_id: str) -> str:
    return task_id.split("-")[1]


def _write_book(rows: Rows, path: Path, fill: Optional[Callable[[openpyxl.Workbook], None]]) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    for r in rows:
        ws.append(r)
    if fill is not None:
        fill(wb)
    wb.save(path)


def generate(root: Path, seed: int = 7) -> None:
    rng = random.Random(seed)
    dataset: list[dict[str, Any]] = []
    manifest: dict[str, list[dict[str, str]]] = {s: [] for s in SAMPLE_SPLITS}
    for t in TEMPLATES:
        for split, count in SAMPLE_SPLITS.items():
            for n in range(count):
                task_id = f"sample-{t.name}-{split}{n}"
                folder = root / "spreadsheet" / task_id
                folder.mkdir(parents=True)
                for k in (1, 2, 3):
                    rows, fill = t.make(rng)
                    _write_book(rows, folder / f"{k}_{task_id}_input.xlsx", None)
                    _write_book(rows, folder / f"{k}_{task_id}_answer.xlsx", fill)
                dataset.append(
                    {
                        "id": task_id,
                        "instruction": t.instruction,
                        "instruction_type": t.kind,
                        "answer_position": t.answer_position,
                        "spreadsheet_path": f"spreadsheet/{task_id}",
                    }
                )
                manifest[split].append({"id": task_id})
    (root / "dataset.json").write_text(json.dumps(dataset, indent=1))
    for split, items in manifest.items():
        (root / "manifest" / split).mkdir(parents=True)
        (root / "manifest" / split / "items.json").write_text(json.dumps(items, indent=1))


def default_sample_dir() -> Path:
    return samples_root(None, "spreadsheet_samples_v1")


def ensure_sample_tasks(sample_dir: Optional[str] = None) -> Path:
    """Generate once; a marker file records completion, and a half-written set is replaced."""
    root = Path(sample_dir).expanduser() if sample_dir else default_sample_dir()
    return ensure_samples(root, generate, MADE_BY)
