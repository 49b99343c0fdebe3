"""SpreadsheetBench splits (the paper's id split shipped and used by default, aliases, overrides) and the data check."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import openpyxl
import pytest
from conftest import SHARED, need_shared_data
from skillopt_envs.base import DataError
from skillopt_envs.spreadsheetbench import check
from skillopt_envs.spreadsheetbench import data as sb_data

SHEETS = SHARED / "spreadsheetbench"
SHIPPED = Path(sb_data.__file__).parent / "splits"


@pytest.fixture(autouse=True)
def _private_check_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLOPT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def shared():
    need_shared_data(SHEETS / "dataset.json", "SpreadsheetBench")
    return SHEETS


def test_the_paper_split_ships_with_its_licence():
    """The paper split: train 80 (53 cell / 27 sheet), val 40 (29 / 11), test 280 (193 / 87), disjoint."""
    sizes = {}
    for split in sb_data.SPLITS:
        items = json.loads((SHIPPED / split / "items.json").read_text())
        kinds = Counter(sb_data.task_type_of(i["instruction_type"]) for i in items)
        sizes[split] = (len(items), kinds["cell_level"], kinds["sheet_level"])
    assert sizes == {"train": (80, 53, 27), "val": (40, 29, 11), "test": (280, 193, 87)}
    ids = [i for s in sb_data.SPLITS for i in sb_data.manifest_ids(SHIPPED, s)]
    assert len(set(ids)) == 400
    licence = (SHIPPED / "LICENSE-SkillOpt").read_text()
    assert "MIT License" in licence and "Microsoft" in licence and "bdfdc30a8e17309c06cdbe8449f01bdecc120203" in licence


def test_real_data_uses_the_paper_split_by_default_with_aliases(shared):
    from skillopt_envs.spreadsheetbench.benchmark import SpreadsheetBenchmark

    bench = SpreadsheetBenchmark({"data_dir": str(shared)})
    have = {str(r["id"]) for r in json.loads((shared / "dataset.json").read_text())}
    for split, aliases in (("train", ()), ("val", ("valid_seen", "selection")), ("test", ("valid_unseen",))):
        expected = [i for i in sb_data.manifest_ids(SHIPPED, split) if i in have]  # manifest order, absent ids left out
        got = [t.task_id for t in bench.load_split(split)]
        assert got == expected and got, split
        for alias in aliases:
            assert [t.task_id for t in bench.load_split(alias)] == expected
    # the shared sample holds 17 of the 400 ids: 3 / 1 / 13
    assert [len(bench.load_split(s)) for s in sb_data.SPLITS] == [3, 1, 13]
    note = bench.data_note()
    assert (
        "SkillOpt's paper split, 3/1/13 train/val/test tasks - DIFFERS from the paper's 80/40/280: 383 of its ids"
        in note
    )
    assert "1 of the 17 tasks in the splits are defective (0/0/1 train/val/test: unparsable-position 1)" in note
    assert (
        f"python -m skillopt_envs.spreadsheetbench.check {shared.resolve()}" in note
        and "formulas scored by cached values" in note
    )
    with pytest.raises(DataError, match="unknown SpreadsheetBench split"):
        bench.load_split("dev")


def test_manifest_dir_overrides_and_foreign_data_falls_back_to_the_hash_split(shared, tmp_path):
    from skillopt_envs.spreadsheetbench.benchmark import SpreadsheetBenchmark

    man = tmp_path / "man"
    for split, ids in (("train", ["37609", "17251"]), ("val", ["39604"]), ("test", ["30468"])):
        (man / split).mkdir(parents=True)
        (man / split / "items.json").write_text(json.dumps([{"id": i} for i in ids]))
    bench = SpreadsheetBenchmark({"data_dir": str(shared), "manifest_dir": str(man)})
    assert [t.task_id for t in bench.load_split("train")] == ["37609", "17251"]
    assert [t.task_id for t in bench.load_split("valid_unseen")] == ["30468"]
    assert f"split: manifest {man}, 2/1/1 train/val/test tasks" in bench.data_note()
    # data that holds none of the paper's ids: the stable hash split, said at start
    root = tmp_path / "foreign"
    rows = [
        r
        for r in json.loads((shared / "dataset.json").read_text())
        if str(r["id"]) not in {i for s in sb_data.SPLITS for i in sb_data.manifest_ids(SHIPPED, s)}
    ]
    root.mkdir()
    (root / "dataset.json").write_text(json.dumps(rows))
    (root / "spreadsheet").symlink_to(shared / "spreadsheet")
    bench = SpreadsheetBenchmark({"data_dir": str(root)})
    sizes = [len(bench.load_split(s)) for s in sb_data.SPLITS]
    assert sum(sizes) == len(rows) == 23 and "stable 20/10/70 hash split" in bench.data_note()


def _book(path: Path, cells: dict[str, object], sheet: str = "Sheet1") -> None:
    wb = openpyxl.Workbook()
    wb.active.title = sheet
    for ref, v in cells.items():
        wb.active[ref] = v
    wb.save(path)


def test_check_lists_every_kind_of_defect(tmp_path, capsys):
    root = tmp_path / "data"

    def task(tid: str, position: str, cases: list[tuple[dict, dict]], sheet: str = "Sheet1", **extra) -> dict:
        folder = root / "spreadsheet" / tid
        folder.mkdir(parents=True)
        for k, (inp, ans) in enumerate(cases, start=1):
            _book(folder / f"{k}_{tid}_input.xlsx", inp, sheet)
            _book(folder / f"{k}_{tid}_answer.xlsx", ans, sheet)
        return {
            "id": tid,
            "instruction": "i",
            "instruction_type": "Cell-Level Manipulation",
            "answer_position": position,
            **extra,
        }

    same_input = {"A1": 5}
    rows = [
        task("good", "B1", [({"A1": 1}, {"A1": 1, "B1": 2}), ({"A1": 2}, {"A1": 2, "B1": 4})]),
        task("badpos", "Totals,Summary!A1:B2", [({"A1": 1}, {"A1": 1})]),
        task("nosheet", "'Results'!B1", [({"A1": 1}, {"A1": 1, "B1": 2})]),
        task("answersheet", "B1", [({"A1": 1}, {"A1": 1, "B1": 2})], answer_sheet="Missing"),
        task(
            "conflict",
            "B1",
            [(same_input, {"A1": 5, "B1": 10}), ({"A1": 1}, {"A1": 1, "B1": 2}), (same_input, {"A1": 5, "B1": 11})],
        ),
        task(
            "agree", "B1", [(same_input, {"A1": 5, "B1": 10}), (same_input, {"A1": 5, "B1": 10.001})]
        ),  # equal under the rule
        {"id": "nofiles", "instruction": "i", "instruction_type": "Sheet-Level Manipulation", "answer_position": "A1"},
    ]
    (root / "dataset.json").write_text(json.dumps(rows))
    assert check.main([str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"SpreadsheetBench data check: {root} (7 tasks, 10 test cases)"
    listed = {line.split("\t")[0].strip(): line.split("\t")[1] for line in out if "\t" in line}
    assert listed == {
        "badpos": "unparsable-position",
        "nosheet": "missing-sheet",
        "answersheet": "missing-sheet",
        "conflict": "conflicting-cases",
        "nofiles": "no-test-cases",
    }
    assert any("cases 1 and 3 have identical inputs but different answers" in line for line in out)
    assert (
        "defective: 5 of 7 tasks (conflicting-cases 1, missing-sheet 2, no-test-cases 1, unparsable-position 1)"
    ) in out
    assert any(line.startswith("split: stable 20/10/70 hash split") for line in out)
    # the cached second pass gives the same answer; --json for scripts
    assert check.main([str(root), "--json"]) == 0
    assert {d["task_id"] for d in json.loads(capsys.readouterr().out)} == set(listed)
    assert check.main([str(tmp_path / "nowhere")]) == 2


def test_check_on_the_shared_data(shared, capsys):
    assert check.main([str(shared)]) == 0
    out = capsys.readouterr().out
    assert (
        "(40 tasks, 120 test cases)" in out
        and "defective: 2 of 40 tasks (conflicting-cases 1, unparsable-position 1)" in out
    )
    assert (
        "  60-7\tunparsable-position\t" in out
        and "  193-42\tconflicting-cases\tcases 2 and 3 have identical inputs" in out
    )
    assert "  test: 1 of 13 tasks defective" in out
