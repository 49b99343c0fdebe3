"""Read cell values from a workbook, recalculating formulas that have no cached value.

Self-contained (stdlib + openpyxl + formulas) because it runs inside the sandbox: the output
workbook was written by model code, so parsing it (zip, XML, formulas) stays contained too.
Usage: python readcells.py WORKBOOK REQUEST.json OUT.json, where REQUEST is {sheet: [cells]}.
Openpyxl writes formulas without cached values, so `=SUM(A1:A3)` written by a script would
read as None; the `formulas` engine computes it so it scores by its value.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from typing import Any

_KEY = re.compile(r"^'?\[[^\]]*\](.*?)'?!\$?([A-Z]+)\$?(\d+)$")


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
        return v.total_seconds() / 86400.0
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
    return v


def recalculate(path: str, cells: list[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """Computed values of `cells` (sheet, cell), keyed by (SHEET NAME UPPERCASE, cell).

    Only the cells asked for and what they depend on are compiled: compiling a whole
    workbook took minutes on real tasks, this takes about a second."""
    import os

    import formulas

    book = os.path.abspath(path)
    refs = ["'[%s]%s'!%s" % (book, sheet.upper().replace("'", "''"), cell) for sheet, cell in cells]
    solution = formulas.ExcelModel().from_ranges(*refs).finish().calculate()
    out: dict[tuple[str, str], Any] = {}
    for key, ranges in solution.items():
        m = _KEY.match(str(key))
        if not m:
            continue  # ranges like A1:B3 are also in the solution; single cells suffice
        value = getattr(ranges, "value", ranges)
        try:
            value = value[0][0]
        except (TypeError, IndexError, KeyError):
            pass
        if str(value) == "empty" or value is None:
            value = None
        out[(m.group(1).upper(), f"{m.group(2)}{m.group(3)}")] = value
    return out


def read(path: str, request: dict[str, list[str]]) -> dict[str, Any]:
    import openpyxl

    values_wb = openpyxl.load_workbook(path, data_only=True)
    formulas_wb = openpyxl.load_workbook(path, data_only=False)
    sheets: dict[str, dict[str, Any]] = {}
    uncached: list[tuple[str, str]] = []
    for sheet, cells in request.items():
        if sheet not in values_wb.sheetnames:
            continue
        vs, fs = values_wb[sheet], formulas_wb[sheet]
        got: dict[str, Any] = {}
        for cell in cells:
            v = vs[cell].value
            f = fs[cell].value
            formula = getattr(f, "text", f)  # array formulas are objects with .text
            if v is None and isinstance(formula, str) and formula.startswith("="):
                uncached.append((sheet, cell))
            got[cell] = v
        sheets[sheet] = got
    recalc_error = ""
    if uncached:
        try:
            computed = recalculate(path, uncached)
            for sheet, cell in uncached:
                sheets[sheet][cell] = computed.get((sheet.upper(), cell))
        except Exception as e:  # noqa: BLE001 - reported to the agent and the result
            recalc_error = f"{type(e).__name__}: {str(e)[:300]}"
    return {
        "sheetnames": list(values_wb.sheetnames),
        "sheets": {s: {c: encode(v) for c, v in cells.items()} for s, cells in sheets.items()},
        "recalculated": len(uncached),
        "recalc_error": recalc_error,
    }


def main(argv: list[str]) -> int:
    workbook, request_path, out_path = argv
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    try:
        result = read(workbook, request)
    except Exception as e:  # noqa: BLE001 - an unreadable workbook is the agent's output problem
        result = {"error": f"cannot read the output workbook: {type(e).__name__}: {str(e)[:300]}"}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    import os

    sys.exit(main(sys.argv[1:] or os.environ["SKILLOPT_ARGS"].split()))
