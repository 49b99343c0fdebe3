"""The SpreadsheetBench data check: inputs that differ only in formats or uncached formulas are not identical
(their instructions are about exactly that), each defect names its rule (the data, or the reference's answer_sheet
prefix), and tasks of the original release with fewer than 3 test cases are listed as notes."""

from __future__ import annotations

import json
from pathlib import Path

import openpyxl
import pytest
from openpyxl.styles import Font
from skillopt_envs.spreadsheetbench import check


@pytest.fixture(autouse=True)
def _private_check_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLOPT_CACHE_DIR", str(tmp_path / "cache"))


def _book(path: Path, cells: dict, bold: tuple[str, ...] = (), formats: dict | None = None) -> None:
    wb = openpyxl.Workbook()
    for ref, v in cells.items():
        wb.active[ref] = v
    for ref in bold:
        wb.active[ref].font = Font(bold=True)
    for ref, fmt in (formats or {}).items():
        wb.active[ref].number_format = fmt
    wb.save(path)


def _task(root: Path, tid: str, cases: list[tuple[dict, dict, dict]], position: str = "B1", **row) -> dict:
    """cases: (input cells, answer cells, input options for _book)."""
    folder = root / "spreadsheet" / tid
    folder.mkdir(parents=True)
    for k, (inp, ans, opts) in enumerate(cases, start=1):
        _book(folder / f"{k}_{tid}_input.xlsx", inp, **opts)
        _book(folder / f"{k}_{tid}_answer.xlsx", ans)
    return {
        "id": tid,
        "instruction": "i",
        "instruction_type": "Cell-Level Manipulation",
        "answer_position": position,
        **row,
    }


def _check(root: Path, rows: list[dict], capsys) -> tuple[dict[str, list[str]], list[str]]:
    (root / "dataset.json").write_text(json.dumps(rows))
    assert check.main([str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    listed = {line.split("\t")[0].strip(): line.split("\t")[1:] for line in out if line.count("\t") >= 3}
    return listed, out


def test_inputs_differing_in_format_or_uncached_formulas_are_not_conflicting(tmp_path, capsys):
    root = tmp_path / "data"
    a = {"A1": 5, "A2": 7}
    rows = [
        # the instruction is about the bold cells: the answers differ because the formats do
        _task(root, "fmt", [(a, {"B1": "A1"}, {"bold": ("A1",)}), (a, {"B1": "A2"}, {"bold": ("A2",)})]),
        _task(root, "numfmt", [(a, {"B1": 1}, {"formats": {"A1": "0.00%"}}), (a, {"B1": 2}, {})]),
        # formulas written by openpyxl have no cached value: cached values alone read both inputs as the same
        _task(root, "formula", [({"A1": "=2*3"}, {"B1": 6}, {}), ({"A1": "=2*4"}, {"B1": 8}, {})]),
        # really identical inputs with different answers stay defective, under the data rule
        _task(root, "same", [(a, {"B1": 1}, {"bold": ("A1",)}), (a, {"B1": 2}, {"bold": ("A1",)})]),
    ]
    listed, _ = _check(root, rows, capsys)
    assert set(listed) == {"same"}
    kind, detail, rule = listed["same"]
    assert kind == "conflicting-cases" and "cases 1 and 2 have identical inputs" in detail and rule == "[rule: data]"


def test_each_defect_names_the_rule_that_makes_it_defective(tmp_path, capsys):
    root = tmp_path / "data"
    one = [({"A1": 1}, {"A1": 1, "B1": 2}, {})]
    rows = [
        # the reference puts answer_sheet in front of a position without `!`: "Totals,Summary!B1" cannot be parsed
        _task(root, "prefix-unparsable", one, "B1", answer_sheet="Totals,Summary"),
        # ... or names a sheet the answer lacks, where the position as given is scored on the first sheet
        _task(root, "prefix-missing", one, "B1", answer_sheet="Results"),
        # the position itself is broken, or names a missing sheet itself: the data rule
        _task(root, "own-unparsable", one, "Totals,Summary!B1"),
        _task(root, "own-missing", one, "'Results'!B1"),
    ]
    listed, out = _check(root, rows, capsys)
    assert {k: (v[0], v[2]) for k, v in listed.items()} == {
        "prefix-unparsable": ("unparsable-position", "[rule: reference]"),
        "prefix-missing": ("missing-sheet", "[rule: reference]"),
        "own-unparsable": ("unparsable-position", "[rule: data]"),
        "own-missing": ("missing-sheet", "[rule: data]"),
    }
    assert "  rule data: 2 (no script can pass it under any scorer)" in out
    assert any(line.startswith("  rule reference: 2 (the reference's scoring") for line in out)
    assert check.main([str(root), "--json"]) == 0
    rules = {d["task_id"]: d["rule"] for d in json.loads(capsys.readouterr().out)}
    assert rules["prefix-missing"] == "reference" and rules["own-missing"] == "data"


def test_tasks_with_fewer_than_three_cases_are_listed_as_notes(tmp_path, capsys):
    root = tmp_path / "data"
    case = ({"A1": 1}, {"A1": 1, "B1": 2}, {})
    rows = [
        _task(root, "full", [case, ({"A1": 2}, {"B1": 4}, {}), ({"A1": 3}, {"B1": 6}, {})]),
        _task(root, "two", [case, case]),
    ]
    _book(root / "spreadsheet" / "two" / "3_two_input.xlsx", {"A1": 9})  # its answer is missing
    listed, out = _check(root, rows, capsys)
    assert listed == {}  # still passable: not defective
    head = out.index("fewer test cases than the release's 3 (not defective, scored on the cases present):")
    assert out[head + 1 :][:1] == ["  two: 2 of 3 test cases; unpaired: 3_two_input.xlsx"]
    assert not any(line.startswith("  full:") for line in out)


def test_the_start_up_note_counts_the_defects_of_the_reference_rule(tmp_path):
    from skillopt_envs.spreadsheetbench import data as sb_data

    root = tmp_path / "data"
    one = [({"A1": 1}, {"A1": 1, "B1": 2}, {})]
    rows = [_task(root, "p", one, "B1", answer_sheet="Results"), _task(root, "d", one, "'Results'!B1")]
    rows += [_task(root, f"ok{i}", one, "B1") for i in range(3)]
    (root / "dataset.json").write_text(json.dumps(rows))
    manifest = tmp_path / "m"
    for split in sb_data.SPLITS:
        (manifest / split).mkdir(parents=True)
        (manifest / split / "items.json").write_text(json.dumps([{"id": r["id"]} for r in rows]))
    tasks = sb_data.load_dataset(root)
    note = check.summary_note(root, tasks, sb_data.plan_splits(root, tasks, str(manifest), skip_missing=False))
    assert (
        "2 of the 5 tasks in the splits are defective (2/2/2 train/val/test: missing-sheet 2), 1 of them only by the "
        "reference's answer_sheet rule; they score 0" in note
    )
