"""SpreadsheetBench's official comparison rule, on plain cell values.

Values are compared per cell of every `sheet!range` in `answer_position`: numbers and
numeric strings rounded to 2 decimals, datetimes as Excel serial days (rounded to a day),
times as `HH:MM` strings, empty string equals None, otherwise types must match.
Formatting is ignored. A task's soft score is the fraction of its test cases passed and
its hard score is 1 only when all pass.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from envs.spreadsheetbench.readcells import col_to_num, num_to_col

_EXCEL_EPOCH = dt.datetime(1899, 12, 30)
_CELL = re.compile(r"^\$?([A-Za-z]{1,3})\$?(\d+)$")


class PositionError(ValueError):
    """An answer_position that cannot be parsed."""


@dataclass(frozen=True)
class Area:
    sheet: Optional[str]  # None: the answer workbook's first sheet
    cells: tuple[str, ...]


def expand_range(cell_range: str) -> tuple[str, ...]:
    parts = cell_range.strip().strip("'").split(":")
    if len(parts) not in (1, 2):
        raise PositionError(f"bad cell range {cell_range!r}")
    coords = []
    for p in parts:
        m = _CELL.match(p.strip())
        if not m:
            raise PositionError(f"bad cell reference {p!r} in {cell_range!r}")
        coords.append((col_to_num(m.group(1)), int(m.group(2))))
    (c1, r1), (c2, r2) = coords[0], coords[-1]
    return tuple(f"{num_to_col(c)}{r}" for r in range(min(r1, r2), max(r1, r2) + 1) for c in range(min(c1, c2), max(c1, c2) + 1))


def parse_position(answer_position: str) -> list[Area]:
    """`'Sheet 1'!A1:B3,C4` -> areas. Quotes are stripped as the official script does
    (it also tolerates a missing opening quote, which occurs in the released data)."""
    areas = []
    for chunk in answer_position.split(","):
        chunk = chunk.strip()
        if not chunk:
            continue
        if "!" in chunk:
            sheet, rng = chunk.rsplit("!", 1)
            areas.append(Area(sheet.strip().strip("'"), expand_range(rng)))
        else:
            areas.append(Area(None, expand_range(chunk)))
    if not areas:
        raise PositionError(f"empty answer_position {answer_position!r}")
    return areas


def transform(v: Any) -> Any:
    if isinstance(v, bool):
        return round(float(v), 2)
    if isinstance(v, (int, float)):
        return round(float(v), 2)
    if isinstance(v, dt.datetime):
        d = v - _EXCEL_EPOCH
        return round(d.days + d.seconds / 86400.0, 0)
    if isinstance(v, dt.time):
        return str(v)[:-3]
    if isinstance(v, dt.date):
        return round(float((dt.datetime(v.year, v.month, v.day) - _EXCEL_EPOCH).days), 0)
    if isinstance(v, str):
        try:
            return round(float(v), 2)
        except ValueError:
            return v
    return v


def cells_equal(expected: Any, actual: Any) -> bool:
    a, b = transform(expected), transform(actual)
    if (a == "" or a is None) and (b == "" or b is None):
        return True
    if type(a) is not type(b):
        return False
    return a == b


# A sheet's values: {sheet name: {cell: value}}
SheetValues = dict[str, dict[str, Any]]


@dataclass
class CaseVerdict:
    passed: bool
    wrong: list[tuple[str, Any, Any]]  # (sheet!cell, expected, actual) - expected never reaches the agent
    problem: str = ""  # a missing sheet, say


def compare(expected: SheetValues, expected_first_sheet: str, actual: SheetValues, areas: Iterable[Area], max_wrong: int = 50) -> CaseVerdict:
    wrong: list[tuple[str, Any, Any]] = []
    for area in areas:
        sheet = area.sheet if area.sheet is not None else expected_first_sheet
        if sheet not in actual:
            return CaseVerdict(False, wrong, f"worksheet {sheet!r} not found in the output workbook")
        exp, got = expected.get(sheet, {}), actual[sheet]
        for cell in area.cells:
            if not cells_equal(exp.get(cell), got.get(cell)):
                if len(wrong) < max_wrong:
                    wrong.append((f"{sheet}!{cell}", exp.get(cell), got.get(cell)))
                else:
                    break
    return CaseVerdict(not wrong, wrong)
