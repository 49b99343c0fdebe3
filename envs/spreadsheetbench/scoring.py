"""SpreadsheetBench's official comparison rule, on plain cell values.

Values are compared per cell of every `sheet!range` in the answer position (ranges expand
column by column, as the official script does; a reversed range holds no cells): numbers and
numeric strings rounded to 2 decimals, datetimes as Excel serial days (rounded to a day),
times as `HH:MM` strings; dates and durations (`timedelta`) are left as they are, the same on
both sides; empty string equals None; otherwise types must match. Formatting is ignored.
A task's soft score is the fraction of its test cases passed and its hard score is 1 only
when all pass. `verification_report` renders one case the way the reference shows it to the
analyst.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from skillopt_envs.spreadsheetbench.readcells import col_to_num, num_to_col

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
    # column-major (A1:B2 -> A1, A2, B1, B2); a reversed range (B2:A1) expands to nothing, as in the official script
    return tuple(f"{num_to_col(c)}{r}" for c in range(c1, c2 + 1) for r in range(r1, r2 + 1))


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


def effective_position(answer_position: str, answer_sheet: Optional[str]) -> str:
    """The position used for scoring and shown to the target: without a `!`, a non-empty
    `answer_sheet` is prefixed - to the first comma-separated range only (quirk: answer-sheet-first-range, kept)."""
    pos = str(answer_position or "")
    if "!" not in pos and answer_sheet and str(answer_sheet).strip():
        return f"{answer_sheet}!{pos}"
    return pos


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
    if isinstance(v, str):
        try:
            return round(float(v), 2)
        except ValueError:
            return v
    return v  # dates, durations (timedelta) and anything else: unchanged, compared as they are


def cells_equal(expected: Any, actual: Any) -> bool:
    a, b = transform(expected), transform(actual)
    if (a == "" or a is None) and (b == "" or b is None):
        return True
    if type(a) is not type(b):
        return False
    return a == b


# A sheet's values: {sheet name: {cell: value}}
SheetValues = dict[str, dict[str, Any]]

VERIFICATION_HEADER = "[POST-EXECUTION VERIFICATION]"
REPORT_LIMIT = 12000  # a longer verification report keeps its first and last 6000 characters


def _empty(v: Any) -> bool:
    t = transform(v)
    return t is None or t == ""


@dataclass
class CellCheck:
    ref: str  # sheet!cell
    expected: Any
    actual: Any
    ok: bool


@dataclass
class CaseVerdict:
    passed: bool
    wrong: list[tuple[str, Any, Any]]  # (sheet!cell, expected, actual) - expected never reaches the agent
    problem: str = ""  # a missing sheet, say
    checks: list[CellCheck] = field(default_factory=list)  # every cell compared, in range order
    missing_sheets: list[str] = field(default_factory=list)
    reason: str = ""  # the first mismatch: value@Sheet1!B3: gt=... pred=...


def compare(
    expected: SheetValues, expected_first_sheet: str, actual: SheetValues, areas: Iterable[Area], max_wrong: int = 50
) -> CaseVerdict:
    """Every cell of every area; a sheet the output lacks fails the case (the other areas are still listed)."""
    wrong: list[tuple[str, Any, Any]] = []
    checks: list[CellCheck] = []
    missing: list[str] = []
    reason = ""
    for area in areas:
        sheet = area.sheet if area.sheet is not None else expected_first_sheet
        if sheet not in actual:
            missing.append(sheet)
            reason = reason or f"sheet-not-found: {sheet!r} is not in the output workbook"
            continue
        exp, got = expected.get(sheet, {}), actual[sheet]
        for cell in area.cells:
            e, a = exp.get(cell), got.get(cell)
            ok = cells_equal(e, a)
            checks.append(CellCheck(f"{sheet}!{cell}", e, a, ok))
            if not ok:
                reason = reason or f"value@{sheet}!{cell}: gt={e!r} pred={a!r}"
                if len(wrong) < max_wrong:
                    wrong.append((f"{sheet}!{cell}", e, a))
    problem = f"worksheet {missing[0]!r} not found in the output workbook" if missing else ""
    return CaseVerdict(not wrong and not missing, wrong, problem, checks, missing, reason)


def cell_lines(v: CaseVerdict) -> list[str]:
    """The per-cell part of a report: `  Sheet!B3: got=..., expected=... ✓|✗`, cells empty on both sides collapsed."""
    lines = [f"  Sheet '{s}' NOT FOUND in output." for s in v.missing_sheets]
    empty = 0
    for c in v.checks:
        if c.ok and _empty(c.expected) and _empty(c.actual):
            empty += 1
            continue
        lines.append(f"  {c.ref}: got={c.actual!r}, expected={c.expected!r} {'✓' if c.ok else '✗'}")
    if empty:
        lines.append(f"  (+{empty} empty cells correct, omitted)")
    return lines


def case_report(case_no: int, v: CaseVerdict) -> str:
    head = f"## Eval Result (case {case_no}): {'PASS' if v.passed else 'FAIL'}"
    body = [head] + ([v.reason] if v.reason else []) + ["## Output Verification"] + cell_lines(v)
    return "\n".join(body)


def exec_error_report(case_no: str, error: str) -> str:
    return f"## Execution (case {case_no})\nERROR: {error[:500]}"


def bound_report(text: str, limit: int = REPORT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n\n... [verification report of {len(text)} characters; the middle is omitted] ...\n\n{text[-half:]}"


def verification_message(parts: list[str]) -> str:
    """The system message appended to the conversation after scoring."""
    return bound_report(VERIFICATION_HEADER + "\n" + "\n\n---\n\n".join(parts))


_REPORT_LINE = re.compile(r"^\s*(\S+!?\w+): got=(.*), expected=(.*) (✓|✗)$")


def wrong_cells_from_report(lines: Iterable[str]) -> tuple[list[tuple[str, str]], int]:
    """(wrong cells as (ref, got repr), number of correct cells) parsed back from report lines, as the
    reference's feedback builder does: cells on sheets whose names hold spaces do not match
    (quirk: spreadsheet-feedback-details, kept)."""
    wrong, right = [], 0
    for line in lines:
        m = _REPORT_LINE.match(line)
        if not m:
            continue
        if m.group(4) == "✓":
            right += 1
        else:
            wrong.append((m.group(1), m.group(2)))
    return wrong, right
