"""SearchQA scoring (SQuAD normalisation), context truncation and episodes over real HTTP."""

from __future__ import annotations

import json

import pytest

from envs.base import DataError
from envs.searchqa.benchmark import SearchQABenchmark, extract_answer, truncate_context
from envs.searchqa.scoring import normalize, score, token_f1


def test_squad_normalisation_exact_match_and_f1():
    assert normalize("The  Eiffel Tower!") == "eiffel tower"
    assert score("the Eiffel tower", ["Eiffel Tower"]) == (1.0, 1.0)
    em, f1 = score("Eiffel", ["Eiffel Tower", "Paris"])
    assert em == 0.0 and f1 == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert score("Paris", ["Eiffel Tower", "paris."]) == (1.0, 1.0)  # max over gold answers
    assert token_f1("a", "the") == 1.0  # both normalise to nothing
    assert score("anything", []) == (0.0, 0.0)


def test_context_is_cut_at_document_boundaries():
    docs = [f"[DOC] [TLE] t{i} [PAR] " + "word " * 20 for i in range(5)]
    ctx = " ".join(docs)
    cut = truncate_context(ctx, 250)
    assert cut.count("[DOC]") == 2 and cut.endswith("word")
    assert truncate_context("first para\n\nsecond para", 15) == "first para"
    assert len(truncate_context("[DOC] " + "x" * 500, 100)) == 100  # one over-long document is cut


def test_answer_extraction():
    assert extract_answer("thinking... <answer> Quillton </answer>") == "Quillton"
    assert extract_answer("no tags") is None


def test_fixture_data_and_manifest(tmp_path):
    items = [{"id": f"q{i}", "question": f"Q{i}?", "context": "[DOC] a", "answers": [f"a{i}"]} for i in range(6)]
    for split, part in (("train", items[:3]), ("val", items[3:5]), ("test", items[5:])):
        (tmp_path / "data" / split).mkdir(parents=True)
        (tmp_path / "data" / split / "items.json").write_text(json.dumps(part))
    (tmp_path / "man" / "val").mkdir(parents=True)
    (tmp_path / "man" / "val" / "items.json").write_text(json.dumps([{"id": "q0"}, {"id": "q5"}]))
    b = SearchQABenchmark({"data_dir": str(tmp_path / "data")})
    assert [t.task_id for t in b.load_split("val")] == ["q3", "q4"]
    b = SearchQABenchmark({"data_dir": str(tmp_path / "data"), "manifest_dir": str(tmp_path / "man")})
    assert [t.task_id for t in b.load_split("val")] == ["q0", "q5"]
    (tmp_path / "man" / "val" / "items.json").write_text(json.dumps([{"id": "nope"}]))
    with pytest.raises(DataError, match="have no item"):
        b.load_split("val")
    (tmp_path / "data" / "test" / "items.json").write_text(json.dumps([{"id": "x"}]))
    with pytest.raises(DataError, match="lacks one of id, question, context, answers"):
        SearchQABenchmark({"data_dir": str(tmp_path / "data")}).load_split("test")
