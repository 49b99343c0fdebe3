"""LiveMathematicianBench data at load time: the paper's split shipped as the default manifest, items whose choices
cannot be scored fairly counted as data errors, dict-keyed choices keeping their labels' case, and broken data
folders (symlink loops, unreadable files, missing ids) as one line. Expected values follow the reference's rules:
its loader labels a choice dict by its keys as given, its scorer compares labels normalised, and it scores every one
of the broken items below (none crashes it), so here they are counted, not refused."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest
from skillopt_envs.base import DataError, EpisodeContext
from skillopt_envs.chat import ChatRequest, ChatResult
from skillopt_envs.livemathematicianbench import benchmark as bm
from skillopt_envs.livemathematicianbench import data as lm

SHIPPED = Path(__file__).resolve().parents[2] / "envs" / "livemathematicianbench" / "splits"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "livemathematicianbench"
MONTHS = ("202511", "202512", "202601", "202602")


class FakeLLM:
    def __init__(self, reply: str):
        self.reply, self.requests = reply, []

    async def chat(self, req: ChatRequest) -> ChatResult:
        self.requests.append(req)
        return ChatResult(self.reply)


def _run(b, task, llm):
    return asyncio.run(b.run_episode(task, "", llm, EpisodeContext("k", False, 1, 0, 42)))


def _shipped_ids(split: str) -> list[str]:
    return [str(it["id"]) for it in json.loads((SHIPPED / split / "items.json").read_text())]


def _row(no: int, choices=None, correct="B") -> dict:
    return {
        "no": no,
        "theorem_type": ["existence"],
        "mcq": {"question": f"q{no}", "choices": choices or ["one", "two", "three"], "correct_choice": correct},
    }


def _raw_data(root: Path, ids: list[str], extra_per_month: int = 2) -> Path:
    """Upstream-style monthly files holding `ids` (in reverse file order) and a few items no split names."""
    by_month: dict[str, list[int]] = {m: [] for m in MONTHS}
    for i in ids:
        month, no = i.split(":")
        by_month[month].append(int(no))
    for month, nos in by_month.items():
        extra = [900 + k for k in range(extra_per_month)]
        rows = [_row(n) for n in sorted(nos, reverse=True) + extra]
        (root / "data" / month).mkdir(parents=True)
        (root / "data" / month / f"qa_{month}_final.json").write_text(json.dumps(rows))
    return root


# --- the paper's split ships ------------------------------------------------------------------------------------


def test_the_paper_split_ids_ship_35_17_125_unique_disjoint_in_skillopts_order():
    facts = json.loads((SHIPPED / "split_manifest.json").read_text())
    assert facts["ids_included"] is True and lm.PAPER_SPLIT_DIR == SHIPPED
    ids = {s: _shipped_ids(s) for s in lm.SPLITS}
    assert (
        {s: len(v) for s, v in ids.items()}
        == lm.PAPER_COUNTS
        == facts["counts"]
        == {"train": 35, "val": 17, "test": 125}
    )
    every = [i for s in lm.SPLITS for i in ids[s]]
    assert len(set(every)) == len(every) == 177
    for s in lm.SPLITS:
        items = json.loads((SHIPPED / s / "items.json").read_text())
        assert all(it["id"] == f"{it['month']}:{it['no']}" for it in items)
        months = {m: sum(it["month"] == m for it in items) for m in MONTHS}
        assert months == {m: lm.PAPER_MONTHS[s][m] for m in MONTHS}
        assert lm.read_manifest(SHIPPED, s) == ids[s]  # read in SkillOpt's order
    assert ids["train"][0] == "202602:22" and ids["train"][1] == "202512:8"  # SkillOpt's order, as its file lists
    notice = (SHIPPED / "NOTICE").read_text()
    assert "bdfdc30a8e17309c06cdbe8449f01bdecc120203" in notice and "Copyright (c) 2026 Microsoft" in notice
    assert "Permission is hereby granted" in notice


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared id files are not on this machine")
def test_the_shipped_id_files_are_skillopts_byte_for_byte():
    for s in lm.SPLITS:
        theirs = SHARED / "livemathematicianbench_id_split" / s / "items.json"
        assert (SHIPPED / s / "items.json").read_bytes() == theirs.read_bytes()


def test_raw_files_without_manifest_dir_use_the_paper_split(tmp_path):
    every = [i for s in lm.SPLITS for i in _shipped_ids(s)]
    root = _raw_data(tmp_path / "raw", every)
    b = bm.LiveMathBenchmark({"data_dir": str(root)})
    for s in lm.SPLITS:
        assert [t.task_id for t in b.load_split(s)] == _shipped_ids(s)
    note = b.data_note()
    assert "35/17/125 train/val/test (as in the paper's split)" in note
    assert f"185 items of the raw files in {root.resolve()}, split by the paper's ids shipped in {SHIPPED}" in note
    assert "data error" not in note and "\n" not in note
    # env.manifest_dir still overrides; the start-up line compares the sizes with what its manifest states
    man = tmp_path / "man"
    for s, xs in {"train": ["202511:900"], "val": ["202512:901"], "test": [every[0], every[-1]]}.items():
        (man / s).mkdir(parents=True)
        (man / s / "items.json").write_text(json.dumps([{"id": i} for i in xs]))
    (man / "split_manifest.json").write_text(json.dumps({"counts": {"train": 1, "val": 1, "test": 3}}))
    other = bm.LiveMathBenchmark({"data_dir": str(root), "manifest_dir": str(man)})
    assert [t.task_id for t in other.load_split("train")] == ["202511:900"]
    note = other.data_note()
    assert "1/1/2 train/val/test (its split_manifest.json states 1/1/3; the paper's split has 35/17/125)" in note
    assert f"split by the ids in {man.resolve()}" in note


def test_an_id_missing_from_the_raw_data_is_one_line_naming_it(tmp_path):
    every = [i for s in lm.SPLITS for i in _shipped_ids(s)]
    gone = _shipped_ids("val")[4]
    root = _raw_data(tmp_path / "raw", [i for i in every if i != gone])
    b = bm.LiveMathBenchmark({"data_dir": str(root)})
    assert len(b.load_split("train")) == 35  # the other splits are whole
    with pytest.raises(DataError) as e:
        b.load_split("val")
    msg = str(e.value)
    month = gone.split(":")[0]
    assert "\n" not in msg and f"1 of 17 ids of the val split in {SHIPPED} (the paper's split" in msg
    assert f"(first: {gone}), which qa_{month}_final.json should hold" in msg and "env.manifest_dir" in msg


def test_cli_with_raw_files_missing_paper_ids_stops_before_ray_with_exit_2(tmp_path, capsys, monkeypatch):
    import ray

    from skillopt_ray.cli.app import main

    root = _raw_data(tmp_path / "raw", _shipped_ids("train")[:3])
    # other tests may leave Ray up in this process: the run must neither start it nor reach it
    ray_was_up, ray_inits = ray.is_initialized(), []
    monkeypatch.setattr(ray, "init", lambda *a, **k: ray_inits.append(a) or pytest.fail("ray.init called"))
    code = main(["+experiment=livemathematicianbench", f"env.data_dir={root}", f"output_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and ray.is_initialized() == ray_was_up and not ray_inits
    assert err.count("\n") == 0 and "32 of 35 ids of the train split" in err and _shipped_ids("train")[3] in err
    assert not (tmp_path / "out").exists()


# --- items the reference scores though their choices are broken ----------------------------------------------------


BROKEN = {
    "one choice": (["only"], "A", "it has 1 choice; a multiple-choice item needs two or more"),
    "same text twice": (["x = 1", "X = 1 ", "x = 3"], "A", "two choices have the same text ('x = 1')"),
    "every label A": ([{"label": "A", "text": t} for t in ("p", "q", "r")], "A", "every choice is labelled 'A'"),
    "a label twice": (
        [{"label": "A", "text": "p"}, {"label": "b.", "text": "q"}, {"label": "B", "text": "r"}],
        "A",
        "the label 'B' is given to 2 choices",
    ),
    "correct not a choice": (["p", "q", "r"], "E", "its correct label 'E' is none of its choices' labels (A, B, C)"),
}


def test_item_defect_names_each_kind_and_passes_sound_items():
    for name, (choices, correct, why) in BROKEN.items():
        item = lm.normalize_row(_row(1, choices, correct), 0, "202511")
        assert lm.item_defect(item) == why, name
    sound = lm.normalize_row(_row(1, {"a": "p", "b": "q"}, "b"), 0, "202511")
    assert lm.item_defect(sound) == ""  # labels compared normalised: a lower-case key still matches B
    assert lm.item_defect(lm.normalize_row(_row(1, ["p", "", "r"], "C"), 0, "202511")) == ""  # a gap is fine


def test_broken_items_are_data_errors_named_with_file_and_item_and_counted(tmp_path):
    root = tmp_path / "d"
    for split in lm.SPLITS:
        (root / split).mkdir(parents=True)
    rows = [_row(n + 1, c, k) for n, (c, k, _why) in enumerate(BROKEN.values())] + [_row(9)]
    items = [lm.normalize_row(r, i, "202601") for i, r in enumerate(rows)]
    (root / "train" / "items.json").write_text(json.dumps(items))
    (root / "val" / "items.json").write_text(json.dumps(items[-1:]))
    (root / "test" / "items.json").write_text(json.dumps(items[:1] + items[-1:]))
    b = bm.LiveMathBenchmark({"data_dir": str(root)})
    tasks = b.load_split("train")
    assert len(tasks) == 6  # nothing is dropped: every item keeps its row
    llm = FakeLLM("<answer>A</answer>")
    results = [_run(b, t, llm) for t in tasks]
    path = root / "train" / "items.json"
    for r, (why, t) in zip(results[:5], zip((w for _c, _k, w in BROKEN.values()), tasks)):
        assert r.fail_reason == "data_error" and r.data_error and not r.scored and r.hard == 0.0
        assert r.error == f"data: {path}: item {t.task_id}: {why}; fix the item (or leave it out of the split)"
    assert len(llm.requests) == 1 and results[5].scored  # only the sound item is asked
    note = b.data_note()
    assert "6 item(s) with broken choices count as data errors, unscored" in note  # 5 in train, 1 in test
    assert f"(first: {path}: item 202601:1: it has 1 choice" in note and "\n" not in note


def test_broken_raw_items_name_their_monthly_file(tmp_path):
    root = _raw_data(tmp_path / "raw", [i for s in lm.SPLITS for i in _shipped_ids(s)])
    month_file = root / "data" / "202602" / "qa_202602_final.json"
    rows = json.loads(month_file.read_text())
    first = _shipped_ids("train")[0]  # 202602:22
    rows = [_row(22, ["p", "p", "q"]) if r["no"] == 22 else r for r in rows]
    month_file.write_text(json.dumps(rows))
    task = bm.LiveMathBenchmark({"data_dir": str(root)}).load_split("train")[0]
    assert task.task_id == first
    assert task.payload["data_error"] == f"{month_file.resolve()}: item {first}: two choices have the same text ('p')"


# --- choice dicts keep their keys' case -------------------------------------------------------------------------


def test_choice_dicts_keep_their_labels_as_given_and_still_score():
    row = {"mcq": {"question": "Q?", "choices": {"b": "two", "a": "one", "c": "three"}, "correct_choice": "b."}}
    item = lm.normalize_row(row, 0, "202512")
    # the reference's rule: the sorted keys are the labels unchanged; the correct label is normalised (B), and its
    # missing text is filled from the choice whose label is B once normalised (b)
    assert item["choices"] == [{"label": k, "text": t} for k, t in (("a", "one"), ("b", "two"), ("c", "three"))]
    assert item["correct_choice"] == {"label": "B", "text": "two"}
    with_text = {**row, "mcq": {**row["mcq"], "correct_choice": {"label": "b", "text": "two"}}}
    assert {"label": "B", "text": "two"} in lm.normalize_row(with_text, 0, "202512")["choices"]  # absent: appended
    assert lm.normalize_row({"mcq": {**row["mcq"], "choices": {"B": "2", "A": "1"}}}, 0)["choices"][0]["label"] == "A"


def test_lower_case_labels_reach_the_target_as_given_and_score_normalised(tmp_path):
    root = tmp_path / "raw"
    (root / "data" / "202512").mkdir(parents=True)
    rows = [{"no": 1, "mcq": {"question": "Q?", "choices": {"b": "two", "a": "one"}, "correct_choice": "b"}}]
    (root / "data" / "202512" / "qa_202512_final.json").write_text(json.dumps(rows))
    man = tmp_path / "man"
    for s in lm.SPLITS:
        (man / s).mkdir(parents=True)
        (man / s / "items.json").write_text(json.dumps([{"id": "202512:1"}]))
    b = bm.LiveMathBenchmark({"data_dir": str(root), "manifest_dir": str(man), "options": {"shuffle_choices": False}})
    task = b.load_split("test")[0]
    llm = FakeLLM("<answer>b</answer>")
    r = _run(b, task, llm)
    assert "## Choices\na. one\nb. two" in llm.requests[0].messages[1]["content"]
    assert r.hard == 1.0 and r.info["correct_label"] == "B"


# --- broken data folders ----------------------------------------------------------------------------------------


def test_symlink_loops_are_one_line_naming_the_path(tmp_path):
    root = _raw_data(tmp_path / "raw", _shipped_ids("train"))
    loop = root / "data" / "qa_202603_final.json"
    os.symlink(loop, loop)  # a link to itself: the reference would fail opening it; it is never skipped
    with pytest.raises(DataError, match=f"^{loop} is a symlink loop; point it at") as e:
        bm.LiveMathBenchmark({"data_dir": str(root)}).load_split("train")
    assert "\n" not in str(e.value)
    loop.unlink()
    os.symlink(tmp_path / "nowhere.json", loop)
    with pytest.raises(DataError, match="is a symlink to nothing"):
        bm.LiveMathBenchmark({"data_dir": str(root)}).load_split("train")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(DataError, match=f"^{tmp_path / 'a'} is a symlink loop"):
        bm.LiveMathBenchmark({"data_dir": str(tmp_path / "a")})
    folders = tmp_path / "folders"
    (folders / "train").mkdir(parents=True)
    os.symlink(folders / "train" / "a.json", folders / "train" / "a.json")
    with pytest.raises(DataError, match="a.json is a symlink loop"):
        bm.LiveMathBenchmark({"data_dir": str(folders)}).load_split("train")


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc")
def test_an_unreadable_file_is_one_line_naming_it(tmp_path):
    root = _raw_data(tmp_path / "raw", _shipped_ids("train"))
    bad = root / "data" / "202511" / "qa_202511_final.json"
    bad.unlink()
    if os.geteuid() == 0:
        bad.symlink_to("/proc/self/mem")  # root reads any mode-000 file; this one fails with EIO even for root
    else:
        shutil.copy(root / "data" / "202512" / "qa_202512_final.json", bad)
        bad.chmod(0)
    with pytest.raises(DataError) as e:
        bm.LiveMathBenchmark({"data_dir": str(root)}).load_split("train")
    assert str(e.value).startswith(f"{bad.resolve()} cannot be read (") and "\n" not in str(e.value)


def test_a_correct_choice_given_by_label_only_takes_its_text_from_the_choices():
    """The reference fills a correct choice's missing text from the choice with that label: `{"label": "a"}` with
    choices `{"a": "ay", ...}` (a dict's keys stay as given, the correct label is normalised to `A`) is "ay"."""
    from skillopt_envs.livemathematicianbench.data import coerce_choices, coerce_correct, normalize_row

    choices = coerce_choices({"a": "ay", "b": "bee"})
    correct, after = coerce_correct({"label": "a"}, choices)
    assert correct == {"label": "A", "text": "ay"} and after == choices
    assert coerce_correct("b)", choices)[0] == {"label": "B", "text": "bee"}
    assert coerce_correct({"label": "C"}, choices)[0] == {"label": "C", "text": ""}  # no such choice: still none
    row = normalize_row({"question": "q", "choices": {"a": "ay", "b": "bee"}, "correct_choice": {"label": "a"}}, 0)
    assert row is not None and row["correct_choice"] == {"label": "A", "text": "ay"}


def _test_only_folder(root: Path) -> Path:
    item = {"id": "202512:1", "question": "Q?", "choices": [{"label": "A", "text": "one"}, {"label": "B", "text": "two"}],
            "correct_choice": {"label": "B", "text": "two"}, "theorem_type": ["x"], "month": "202512", "no": 1}  # fmt: skip
    for s in ("train", "val", "test"):
        (root / s).mkdir(parents=True)
        (root / s / "items.json").write_text(json.dumps([item] if s == "test" else []))
    return root


def test_a_test_only_data_folder_serves_an_evaluation_and_says_what_runs(tmp_path):
    """An evaluation reads only the split it evaluates: a folder whose train and val are empty serves eval.split=test
    and eval.split=all (which evaluates test alone, as the start-up line says); training is still refused."""
    b = bm.LiveMathBenchmark({"data_dir": str(_test_only_folder(tmp_path / "d"))})
    b.preflight(["test"])
    b.preflight(["all"])
    assert [t.task_id for t in b.load_split("all")] == ["202512:1"]
    note = b.data_note()
    assert "0/0/1 train/val/test" in note and "the train and val splits are empty" in note
    assert "eval.split=all evaluates test alone" in note
    with pytest.raises(DataError, match="train split .* is empty"):
        b.preflight(["train", "val", "test"])
    for s in ("train", "val", "test"):
        (tmp_path / "d" / s / "items.json").write_text("[]")
    with pytest.raises(DataError, match="is empty"):
        bm.LiveMathBenchmark({"data_dir": str(tmp_path / "d")}).load_split("all")
