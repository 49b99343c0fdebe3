"""SkillOpt's ALFWorld paper split ships with the project and is the default on real data (issue 13, part 1).

The shared data (../shared/data/alfworld) holds 54 of the split's 191 games: all 18 val games, 18 of the 39 train
games and 18 of the 134 test games. Tests that load the paper split skip exactly the games absent from it
(skip_missing_games=true) and check the counts against what is present; the manifests themselves are checked in full.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from skillopt_envs.alfworld.benchmark import AlfWorldBenchmark
from skillopt_envs.alfworld.data import PAPER_SPLIT_DIR, TASK_TYPES, task_type_of
from skillopt_envs.base import DataError

PAPER = {"train": 39, "val": 18, "test": 134}


def _items(split: str) -> list[dict]:
    return json.loads((PAPER_SPLIT_DIR / split / "items.json").read_text())


def _present(root: Path, split: str) -> list[dict]:
    return [it for it in _items(split) if (root / it["gamefile"]).is_file()]


def test_shipped_manifests_are_the_paper_split():
    assert {s: len(_items(s)) for s in PAPER} == PAPER
    # the reference's manifest: train from json_2.1.1/train with 9 clean, 7 pick_and_place, 7 heat, 6 cool,
    # 5 look, 5 pick_two
    assert Counter(task_type_of(it["gamefile"]) for it in _items("train")) == {
        "pick_clean_then_place_in_recep": 9,
        "pick_and_place": 7,
        "pick_heat_then_place_in_recep": 7,
        "pick_cool_then_place_in_recep": 6,
        "look_at_obj_in_light": 5,
        "pick_two_obj_and_place": 5,
    }
    for split, folder in (("train", "/train/"), ("val", "/valid_seen/"), ("test", "/valid_unseen/")):
        items = _items(split)
        assert all(folder in it["gamefile"] and it["gamefile"].startswith("json_2.1.1/") for it in items)
        assert [it["id"] for it in items] == [f"{split}:{i:04d}" for i in range(len(items))]
    assert json.loads((PAPER_SPLIT_DIR / "split_manifest.json").read_text())["counts"] == PAPER
    licence = (PAPER_SPLIT_DIR / "LICENSE-SkillOpt").read_text()
    assert "MIT License" in licence and "Microsoft" in licence


def test_shipped_manifests_match_the_shared_copy(alfworld_root):
    shared = alfworld_root / "skillopt_alfworld_path_split"
    for name in ("train/items.json", "val/items.json", "test/items.json", "split_manifest.json"):
        assert (PAPER_SPLIT_DIR / name).read_bytes() == (shared / name).read_bytes(), name


def test_paper_split_is_the_default_on_real_data(alfworld_root):
    bench = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": {"skip_missing_games": True}})
    splits = {s: bench.load_split(s) for s in ("train", "val", "test")}
    for split, tasks in splits.items():
        present = _present(alfworld_root, split)
        # the games absent from the shared data are skipped; everything present is used, in manifest order
        assert [t.task_id for t in tasks] == [it["id"] for it in present], split
        assert all(t.task_type == task_type_of(it["gamefile"]) for t, it in zip(tasks, present))
    assert {s: len(t) for s, t in splits.items()} == {"train": 18, "val": 18, "test": 18}
    assert {t.task_type for t in splits["val"]} == set(
        TASK_TYPES
    )  # reference names, pick_and_place_simple -> pick_and_place
    # the reference's split aliases: valid_seen / selection -> val, valid_unseen -> test
    ids = {s: [t.task_id for t in bench.load_split(s)] for s in ("valid_seen", "selection", "valid_unseen")}
    assert ids["valid_seen"] == ids["selection"] == [t.task_id for t in splits["val"]]
    assert ids["valid_unseen"] == [t.task_id for t in splits["test"]]
    assert len(bench.load_split("all")) == 54
    note = bench.data_note()
    assert "paper split" in note and "18/18/18" in note and "39/18/134" in note and "skipped" in note
    assert "21 train" in note and "116 test" in note


def test_missing_paper_games_stop_the_run_unless_skipped(alfworld_root):
    bench = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": {}})
    assert len(bench.load_split("val")) == 18  # every val game is present
    with pytest.raises(DataError, match="21 of 39 games .* missing.*skip_missing_games=true"):
        bench.load_split("train")
    assert "skip_missing_games=true" in bench.data_note() and "stops" in bench.data_note()


def test_complete_data_gives_the_paper_sizes(alfworld_root, tmp_path):
    """A data folder holding every game of the split (links to a few real games under the listed paths)."""
    real = sorted(alfworld_root.glob("json_2.1.1/*/*/*/game.tw-pddl"))
    for split in PAPER:
        for i, it in enumerate(_items(split)):
            dst = tmp_path / it["gamefile"]
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(real[i % len(real)])
    bench = AlfWorldBenchmark({"data_dir": str(tmp_path), "options": {}})
    assert {s: len(bench.load_split(s)) for s in PAPER} == PAPER
    assert "39/18/134" in bench.data_note() and "missing" not in bench.data_note()
    # data_dir may also point at json_2.1.1 itself
    assert len(AlfWorldBenchmark({"data_dir": str(tmp_path / "json_2.1.1"), "options": {}}).load_split("val")) == 18


def test_manifest_dir_overrides_the_paper_split(alfworld_root, tmp_path):
    for split in PAPER:
        (tmp_path / "m" / split).mkdir(parents=True)
        (tmp_path / "m" / split / "items.json").write_text(json.dumps(_present(alfworld_root, split)[:2]))
    bench = AlfWorldBenchmark({"data_dir": str(alfworld_root), "manifest_dir": str(tmp_path / "m"), "options": {}})
    assert [t.task_id for t in bench.load_split("selection")] == [it["id"] for it in _present(alfworld_root, "val")[:2]]
    assert len(bench.load_split("train")) == 2 and "paper" not in bench.data_note()


def test_folder_split_source_walks_every_game(alfworld_root):
    bench = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": {"split_source": "folders"}})
    train = bench.load_split("train")
    assert len(train) == 18 and all(t.task_id.startswith("train/") for t in train)
    assert {t.task_type for t in train} == set(TASK_TYPES)
    assert [t.task_id for t in bench.load_split("selection")] == [t.task_id for t in bench.load_split("valid_seen")]
    with pytest.raises(DataError, match="split_source"):
        AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": {"split_source": "mine"}})


@pytest.mark.slow
def test_sample_games_keep_their_folder_split(monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)  # importing the engine sets it; no data configured here
    bench = AlfWorldBenchmark({"options": {}})  # the default sample folder (generated once per machine)
    assert "built-in sample games" in bench.data_note()
    train, val, test = (bench.load_split(s) for s in ("train", "selection", "valid_unseen"))
    assert (len(train), len(val), len(test)) == (12, 6, 6)  # 2/1/1 per task type, all six types
    assert {t.task_type for t in train} == {t.task_type for t in val} == set(TASK_TYPES)
