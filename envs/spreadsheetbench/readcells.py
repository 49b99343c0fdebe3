"""Read cell values from a workbook, optionally recalculating formulas that have no cached value.

Self-contained (stdlib + openpyxl + formulas) because it runs inside the sandbox: the output
workbook was written by model code, so parsing it (zip, XML, formulas) stays contained too.
Usage: python readcells.py REQUEST.json OUT.json [--recalculate], where REQUEST is
{workbook: {sheet: [cells]}}; OUT holds one result per workbook (one sandbox start reads every
test case's output). Openpyxl writes formulas without cached values, so `=SUM(A1:A3)` written
by a script reads as None, as in the official comparison; with --recalculate the `formulas`
engine computes it so it scores by its value. Durations (`timedelta`) travel as durations, so
both sides of the comparison see the same type.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from typing import Any

_KEY = re.compile(r"^'?\[[^\]]*\](.*?)'?!\$?([A-Z]+)\$?(\d+)$")
_WHOLE_COLUMN = re.compile(r"(?<![A-Za-z0-9_.$])(\$?)([A-Z]{1,3}):(\$?)([A-Z]{1,3})(?![A-Za-z0-9_(])")
_RANGE = re.compile(r"^'?\[[^\]]*\](.*?)'?!\$?([A-Z]+)\$?(\d+):\$?([A-Z]+)\$?(\d+)$")


def encode(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dt.datetime):
        return {"t": "datetime", "v": v.isoformat()}
    if isinstance(v, dt.date):
        return {"t": "date", "v": v.isoformat()}
    if isinstance(v, dt.time):
        return {"t": "time", "v": v.isoformat()}
    if isinstance(v, dt.timedelta):
        return {"t": "timedelta", "v": [v.days, v.seconds, v.microseconds]}
    item = getattr(v, "item", None)  # numpy scalars
    if callable(item):
        return encode(item())
    return str(v)


def decode(v: Any) -> Any:
    if isinstance(v, dict) and "t" in v:
        kind, text = v["t"], v["v"]
        if kind == "datetime":
            return dt.datetime.fromisoformat(text)
        if kind == "date":
            return dt.date.fromisoformat(text)
        if kind == "time":
            return dt.time.fromisoformat(text)
        if kind == "timedelta":
            days, seconds, micro = text
            return dt.timedelta(days=days, seconds=seconds, microseconds=micro)
    return v


def col_to_num(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch.upper()) - 64
    return n


def _quoted_sheet(sheet: str) -> str:
    """A sheet name as it appears inside a quoted external reference: upper case, quotes doubled."""
    return sheet.upper().replace("'", "''")


def num_to_col(n: int) -> str:
    out = ""
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out


def _plain(v: Any) -> Any:
    return None if v is None or str(v) == "empty" else v


def _bounded_copy(path: str) -> str:
    """A copy whose whole-column references (`$E:$E`) end at the last used row: the engine
    otherwise materialises a million rows per reference (minutes per formula on real tasks)."""
    import os
    import tempfile

    import openpyxl

    wb = openpyxl.load_workbook(path)
    last = max((ws.max_row for ws in wb.worksheets), default=1)

    def bound(m: re.Match) -> str:
        return f"{m.group(1)}{m.group(2)}$1:{m.group(3)}{m.group(4)}${last}"

    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for c in row:
                v = c.value
                text = getattr(v, "text", v)
                if isinstance(text, str) and text.startswith("=") and ":" in text:
                    new = _WHOLE_COLUMN.sub(bound, text)
                    if new != text:
                        if hasattr(v, "text"):
                            v.text = new
                        else:
                            c.value = new
    fd, out = tempfile.mkstemp(suffix=".xlsx", prefix="bounded-", dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    wb.save(out)
    return out


def recalculate(path: str, cells: list[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """Computed values of `cells` (sheet, cell), keyed by (SHEET NAME UPPERCASE, cell).

    Only one bounding range per sheet and what it depends on is compiled: compiling a whole
    workbook, or each cell on its own, took minutes on real tasks; this takes about a second."""
    import os

    import formulas

    boxes: dict[str, list[int]] = {}
    for sheet, cell in cells:
        m = re.match(r"([A-Z]+)(\d+)$", cell)
        assert m, f"not a cell reference: {cell!r}"  # callers pass parsed A1 references
        c, r = col_to_num(m.group(1)), int(m.group(2))
        b = boxes.setdefault(sheet, [c, r, c, r])
        boxes[sheet] = [min(b[0], c), min(b[1], r), max(b[2], c), max(b[3], r)]
    book = _bounded_copy(path)
    refs = [
        f"'[{book}]{_quoted_sheet(sheet)}'!{num_to_col(b[0])}{b[1]}:{num_to_col(b[2])}{b[3]}"
        for sheet, b in boxes.items()
    ]
    try:
        solution = formulas.ExcelModel().from_ranges(*refs).finish().calculate()
    finally:
        os.remove(book)
    out: dict[tuple[str, str], Any] = {}
    for key, ranges in solution.items():
        m = _KEY.match(str(key))
        value = getattr(ranges, "value", ranges)
        if m:
            try:
                out[(m.group(1).upper(), f"{m.group(2)}{m.group(3)}")] = _plain(value[0][0])
            except (TypeError, IndexError, KeyError):
                out[(m.group(1).upper(), f"{m.group(2)}{m.group(3)}")] = _plain(value)
            continue
        m = _RANGE.match(str(key))
        if not m:
            continue
        sheet, c0, r0 = m.group(1).upper(), col_to_num(m.group(2)), int(m.group(3))
        for i, row in enumerate(value):
            for j, v in enumerate(row):
                out.setdefault((sheet, f"{num_to_col(c0 + j)}{r0 + i}"), _plain(v))
    return out


def _invalid_formulas(values_wb: Any, formulas_wb: Any, limit: int = 10) -> list[str]:
    """Formulas without a cached value (so written by the script, not by Excel) that do not parse."""
    from formulas import Parser

    bad: list[str] = []
    for ws in formulas_wb.worksheets:
        vs = values_wb[ws.title]
        for row in ws.iter_rows():
            for c in row:
                text = getattr(c.value, "text", c.value)
                if isinstance(text, str) and text.startswith("=") and vs[c.coordinate].value is None:
                    try:
                        Parser().ast(text)
                    except Exception as e:  # noqa: BLE001 - the parser's errors have no common base
                        bad.append(f"{ws.title}!{c.coordinate} {text[:80]!r}: {type(e).__name__}")
                        if len(bad) >= limit:
                            return bad
    return bad


def read(path: str, request: dict[str, list[str]], recalculate_formulas: bool = True) -> dict[str, Any]:
    import openpyxl

    values_wb = openpyxl.load_workbook(path, data_only=True)
    formulas_wb = openpyxl.load_workbook(path, data_only=False) if recalculate_formulas else None
    sheets: dict[str, dict[str, Any]] = {}
    uncached: list[tuple[str, str]] = []
    for sheet, cells in request.items():
        if sheet not in values_wb.sheetnames:
            continue
        vs, fs = values_wb[sheet], (formulas_wb[sheet] if formulas_wb is not None else None)
        got: dict[str, Any] = {}
        for cell in cells:
            v = vs[cell].value
            f = fs[cell].value if fs is not None else None
            formula = getattr(f, "text", f)  # array formulas are objects with .text
            if v is None and isinstance(formula, str) and formula.startswith("="):
                uncached.append((sheet, cell))
            got[cell] = v
        sheets[sheet] = got
    recalc_error = ""
    invalid = _invalid_formulas(values_wb, formulas_wb) if uncached and formulas_wb is not None else []
    # a formula the script wrote that is not even valid syntax is the script's fault: then nothing is recalculated
    # and every uncached cell reads as the official rule reads it (empty); an engine failure on valid formulas is not
    if uncached and recalculate_formulas and not invalid:
        try:
            computed = recalculate(path, uncached)
            for sheet, cell in uncached:
                sheets[sheet][cell] = computed.get((sheet.upper(), cell))
        except Exception as e:  # noqa: BLE001 - reported to the agent and the result
            recalc_error = f"{type(e).__name__}: {str(e)[:300]}"
    return {
        "sheetnames": list(values_wb.sheetnames),
        "sheets": {s: {c: encode(v) for c, v in cells.items()} for s, cells in sheets.items()},
        "recalculated": len(uncached) if recalculate_formulas else 0,
        "recalc_error": recalc_error,
        "invalid_formulas": invalid,
    }


def main(argv: list[str]) -> int:
    recalc = "--recalculate" in argv
    request_path, out_path = [a for a in argv if a != "--recalculate"]
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    results = {}
    for workbook, cells in request.items():
        try:
            results[workbook] = read(workbook, cells, recalc)
        except Exception as e:  # noqa: BLE001 - an unreadable workbook is the agent's output problem
            results[workbook] = {"error": f"cannot read the output workbook: {type(e).__name__}: {str(e)[:300]}"}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    import os

    sys.exit(main(sys.argv[1:] or os.environ["SKILLOPT_ARGS"].split()))
