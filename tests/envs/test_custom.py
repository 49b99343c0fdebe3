"""Your own tasks (envs/custom): task files, the seeded split, each scorer against hand-computed values, and episodes
with a stand-in model. Check scripts in the sandbox are in tests/envs/test_custom_check.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from custom_helpers import FakeLLM, bench, play, write_jsonl
from skillopt_envs.base import DataError
from skillopt_envs.custom.scorers import SCORERS, ScoreInput, extract_answer, parse_number
from skillopt_envs.kit import parse_ratio, ratio_split, split_counts

from skillopt_ray import cli


def score(name: str, reply: str, golds: list[str], task: dict[str, Any] | None = None, tol: float = 1e-6) -> float:
    return SCORERS[name](ScoreInput(reply, extract_answer(reply), golds, task or {}, tol)).value


# ---------- scorers ----------


def test_exact_match_normalises_as_searchqa_does():
    assert score("exact_match", "thinking...\n<answer>The Eiffel Tower!</answer>", ["eiffel tower"]) == 1.0
    assert score("exact_match", "<answer>Eiffel</answer>", ["eiffel tower"]) == 0.0
    assert score("exact_match", "so the answer is\nParis", ["London", "paris"]) == 1.0  # last line, any gold


def test_contains_matches_whole_words_in_the_reply():
    assert score("contains", "I think it is Paris, in France.", ["paris"]) == 1.0
    assert score("contains", "I think it is Paris, in France.", ["par"]) == 0.0


def test_f1_and_anls_are_graded():
    # tokens after normalising: [quick, brown, fox] vs [quick, red, fox]: 2 shared, P = R = 2/3
    assert score("f1", "<answer>the quick brown fox</answer>", ["quick red fox"]) == pytest.approx(2 / 3)
    # one edit over 5 characters: 1 - 1/5
    assert score("anls", "<answer>helo</answer>", ["hello"]) == pytest.approx(0.8)
    assert score("anls", "<answer>xyz</answer>", ["hello"]) == 0.0


def test_mcq_reads_labels_and_choice_texts():
    task = {"choices": ["red", "green", "blue"]}
    assert score("mcq", "<answer>(b)</answer>", ["B"], task) == 1.0
    assert score("mcq", "<answer>green</answer>", ["B"], task) == 1.0
    assert score("mcq", "<answer>blue</answer>", ["B"], task) == 0.0
    assert score("mcq", "<answer>C) because</answer>", ["blue"], {"choices": {"A": "red", "C": "blue"}}) == 1.0
    assert score("mcq", "<answer>purple</answer>", ["B"], task) == 0.0


def test_numeric_uses_a_relative_tolerance():
    assert parse_number("about 1,234.5 units") == 1234.5
    assert score("numeric", "<answer>1,000.0001</answer>", ["1000"]) == 1.0  # 1e-7 relative
    assert score("numeric", "<answer>1,000.0001</answer>", ["1000"], tol=1e-9) == 0.0
    assert score("numeric", "<answer>about 12%</answer>", ["12"]) == 1.0
    assert score("numeric", "<answer>none</answer>", ["12"]) == 0.0


def test_regex_searches_the_answer():
    assert score("regex", "<answer>555-1234</answer>", [r"^\d{3}-\d{4}$"]) == 1.0
    assert score("regex", "<answer>5551234</answer>", [r"^\d{3}-\d{4}$"]) == 0.0


# ---------- the ratio split ----------


def test_split_counts_floor_then_largest_remainder_then_larger_weight():
    assert split_counts(176, (2, 1, 7)) == [35, 18, 123]
    assert split_counts(177, (2, 1, 7)) == [35, 18, 124]
    assert split_counts(175, (2, 1, 7)) == [35, 17, 123]  # tie 0.5 / 0.5: the larger weight (test) wins
    assert split_counts(10, (2, 1, 7)) == [2, 1, 7]


def test_ratio_split_is_seeded_and_covers_every_item():
    items = list(range(30))
    a, b = ratio_split(items, (2, 1, 7), 42), ratio_split(items, (2, 1, 7), 42)
    assert a == b and sorted(a["train"] + a["val"] + a["test"]) == items
    assert [len(a[s]) for s in ("train", "val", "test")] == [6, 3, 21]
    assert ratio_split(items, (2, 1, 7), 7) != a
    with pytest.raises(DataError, match="split_ratio"):
        parse_ratio("2:1")


# ---------- task files ----------


def test_a_jsonl_file_splits_by_ratio_and_keeps_given_splits(tmp_path):
    rows = [{"id": f"q{i}", "prompt": f"p{i}", "answer": str(i)} for i in range(20)]
    rows.append({"id": "pinned", "prompt": "p", "answer": ["a", "b"], "split": "selection"})
    b = bench(write_jsonl(tmp_path / "t.jsonl", rows))
    train, val, test = (b.load_split(s) for s in ("train", "valid_seen", "test"))
    assert [len(train), len(val), len(test)] == [4, 3, 14]  # 20 by 2:1:7 -> 4/2/14, plus the pinned one
    assert val[0].task_id == "pinned" and val[0].payload["golds"] == ["a", "b"]
    assert len(b.load_split("all")) == 21


def test_a_folder_with_split_files(tmp_path):
    for s in ("train", "val", "test"):
        write_jsonl(tmp_path / f"{s}.jsonl", [{"id": f"{s}1", "prompt": "p", "answer": "a"}])
    assert [t.task_id for t in bench(tmp_path).load_split("val")] == ["val1"]
    (tmp_path / "test.jsonl").unlink()
    with pytest.raises(DataError, match="not test.jsonl"):
        bench(tmp_path).load_split("train")


@pytest.mark.parametrize(
    "line,said",
    [
        ('{"id": "a", "prompt": "p", "answer": "x"', "t.jsonl:2: not valid JSON"),
        ('{"prompt": "p", "answer": "x"}', "t.jsonl:2: the task has no id"),
        ('{"id": "b", "answer": "x"}', "t.jsonl:2: task 'b' has no prompt"),
        ('{"id": "b", "prompt": "p", "answers": "x"}', "t.jsonl:2: unknown field\\(s\\) answers"),
        ('{"id": "b", "prompt": "p", "answer": {"x": 1}}', "answer must be a string or a list"),
        ('{"id": "ok", "prompt": "p", "answer": "y"}', "id 'ok' is used again \\(first on line 1\\)"),
        ('{"id": "b", "prompt": "p"}', "task 'b' has no answer, which scorer=exact_match"),
    ],
)
def test_a_malformed_line_names_the_file_and_line(tmp_path, line, said):
    path = write_jsonl(tmp_path / "t.jsonl", ['{"id": "ok", "prompt": "p", "answer": "x"}', line])
    with pytest.raises(DataError, match=said):
        bench(path).preflight(["train", "val", "test"])


def test_a_malformed_line_stops_the_cli_with_exit_2_before_ray(tmp_path, capsys):
    path = write_jsonl(tmp_path / "t.jsonl", ['{"id": "a", "prompt": "p", "answer": "x"}', "{not json"])
    code = cli.main(["+experiment=custom", f"env.data_dir={path}", f"output_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:2: not valid JSON" in err and len(err.strip().splitlines()) == 1


def test_options_are_checked_before_anything_starts(tmp_path, capsys):
    path = write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "prompt": "p", "answer": "x"}])
    for bad, said in [
        ("env.options.scorer=nope", "env.options.scorer='nope' is invalid"),
        ("env.options.scorer=script", "needs env.options.check"),
        ("env.options.split_ratio=2:x:1", "split_ratio"),
    ]:
        assert cli.main(["+experiment=custom", f"env.data_dir={path}", bad]) == 2
        assert said in capsys.readouterr().err
    assert cli.main(["+experiment=custom"]) == 2
    assert "needs env.data_dir" in capsys.readouterr().err


def test_a_missing_check_is_refused_before_the_run(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "prompt": "p"}])
    with pytest.raises(DataError, match="does not exist"):
        bench(path, scorer="script", check=str(tmp_path / "nope.py")).preflight(["train"])
    sh = tmp_path / "check.sh"
    sh.write_text("#!/bin/sh\nexit 0\n")  # not executable
    with pytest.raises(DataError, match="not executable"):
        bench(path, scorer="script", check=str(sh)).preflight(["train"])


# ---------- episodes with a stand-in model ----------


def test_a_chat_episode_shows_the_analysts_prompt_reply_answer_and_reason(tmp_path):
    rows = [{"id": "q1", "prompt": "Capital of France?", "answer": "Paris", "split": "train", "system": "Be brief."}]
    rows += [{"id": f"v{s}", "prompt": "p", "answer": "a", "split": s} for s in ("val", "test")]
    b = bench(write_jsonl(tmp_path / "t.jsonl", rows))
    llm = FakeLLM("Thinking.\n<answer>paris</answer>")
    r = play(b, "train", llm)
    system = llm.sent[0].messages[0]["content"]
    assert "RULE-1" in system and "Be brief." in system and llm.sent[0].key == "t/e1/q1/t0"
    assert (r.hard, r.soft, r.fail_reason, r.task_description) == (1.0, 1.0, "", "Capital of France?")
    r = play(b, "train", FakeLLM("<answer>Lyon</answer>"))
    verdict = r.trajectory[-1]["content"]
    assert r.hard == 0.0 and r.scored and "Expected: ['Paris']" in verdict and "'Lyon'" in verdict
    assert r.fail_reason.startswith("exact_match=0.000")
    assert r.info["gold_answers"] == ["Paris"] and r.info["predicted_answer"] == "Lyon"


def test_mcq_lists_the_choices_to_the_target(tmp_path):
    rows = [{"id": f"q{s}", "prompt": "Sky?", "choices": ["red", "blue"], "answer": "B", "split": s} for s in ("train", "val", "test")]  # fmt: skip
    llm = FakeLLM("<answer>B</answer>")
    r = play(bench(write_jsonl(tmp_path / "t.jsonl", rows), scorer="mcq"), "train", llm)
    assert "A. red\nB. blue" in llm.sent[0].messages[1]["content"] and r.hard == 1.0


# ---------- the kit's plumbing ----------


def test_split_names_and_their_aliases():
    from skillopt_envs.kit import split_name

    assert [split_name(s, "x") for s in ("train", "selection", "valid_seen", "valid_unseen")] == [
        "train",
        "val",
        "val",
        "test",
    ]
    with pytest.raises(DataError, match="unknown mine split 'dev'"):
        split_name("dev", "mine")


def test_data_root_prefers_data_dir_then_the_variable(tmp_path, monkeypatch):
    from skillopt_envs.kit import data_root

    monkeypatch.setenv("MY_DATA", str(tmp_path / "from-var"))
    assert data_root({"data_dir": str(tmp_path / "given")}, "MY_DATA") == tmp_path / "given"
    assert data_root({}, "MY_DATA") == tmp_path / "from-var"
    assert data_root({}, "") is None


def test_samples_are_made_once_and_never_left_half_made(tmp_path):
    from skillopt_envs.kit import ensure_samples

    calls = []

    def write(folder: Path) -> None:
        calls.append(folder)
        (folder / "items.json").write_text("[]")

    root = ensure_samples(tmp_path / "samples_v1", write, "a test")
    assert (root / "items.json").exists() and (root / "COMPLETE").exists()
    assert ensure_samples(tmp_path / "samples_v1", write, "a test") == root and len(calls) == 1

    def broken(folder: Path) -> None:
        (folder / "half.json").write_text("{")
        raise OSError("disk full")

    with pytest.raises(OSError):
        ensure_samples(tmp_path / "other", broken, "a test")
    assert not (tmp_path / "other").exists()
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))  # the makers' lock files stay
    assert left == ["samples_v1"]


# ---------- answers no reply can meet, patterns that never finish ----------


@pytest.mark.parametrize(
    "scorer,row,said",
    [
        ("numeric", {"answer": "about a dozen"}, "answer 'about a dozen' holds no number"),
        ("numeric", {"answer": ["12", "n/a"]}, "answer 'n/a' holds no number"),
        ("mcq", {"answer": "E", "choices": ["red", "blue"]}, "answer 'E' names none of the choices A, B"),
        ("mcq", {"answer": "green", "choices": {"a": "red", "b": "blue"}}, "answer 'green' names none of the choices"),
    ],
)
def test_an_answer_its_scorer_can_never_meet_is_refused_naming_file_and_line(tmp_path, capsys, scorer, row, said):
    good = {"id": "ok", "prompt": "p", "answer": "A", "choices": ["one", "two"]} if scorer == "mcq" else None
    rows = [good or {"id": "ok", "prompt": "p", "answer": "1"}, {"id": "bad", "prompt": "p", **row}]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(DataError, match=f"t.jsonl:2: task 'bad': {said}"):
        bench(path, scorer=scorer).preflight(["train", "val", "test"])
    code = cli.main(["+experiment=custom", f"env.data_dir={path}", f"env.options.scorer={scorer}",
                     f"output_dir={tmp_path / 'out'}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:2: task 'bad'" in err and len(err.strip().splitlines()) == 1


def test_answers_a_scorer_can_meet_still_pass(tmp_path):
    rows = [{"id": f"n{s}", "prompt": "p", "answer": ["1,200", "-3.5e2", "40%"], "split": s} for s in ("train", "val", "test")]  # fmt: skip
    bench(write_jsonl(tmp_path / "n.jsonl", rows), scorer="numeric").preflight(["train", "val", "test"])
    rows = [{"id": f"m{s}", "prompt": "p", "choices": {"a": "ay", "b": "bee"}, "answer": ["(b)", "bee", "B. bee"], "split": s} for s in ("train", "val", "test")]  # fmt: skip
    bench(write_jsonl(tmp_path / "m.jsonl", rows), scorer="mcq").preflight(["train", "val", "test"])


def test_a_catastrophic_pattern_is_a_data_error_naming_it_not_a_stall(tmp_path):
    import time

    rows = [{"id": f"r{s}", "prompt": "p", "answer": ["(a|aa)+$", "(a+)+$"], "split": s} for s in ("train", "val", "test")]  # fmt: skip
    b = bench(write_jsonl(tmp_path / "t.jsonl", rows), scorer="regex")
    start = time.monotonic()
    r = play(b, "train", FakeLLM("<answer>" + "a" * 34 + "b</answer>"))
    assert time.monotonic() - start < 30  # Python's re takes minutes on this pair
    assert r.data_error and not r.scored and "'(a|aa)+$'" in r.error and "did not finish" in r.error
    r = play(b, "train", FakeLLM("<answer>" + "a" * 34 + "</answer>"))  # an answer that matches still scores
    assert (r.hard, r.scored) == (1.0, True)


def test_the_regex_scorer_keeps_python_re_semantics():
    cases = [(r"^\d{3}-\d{4}$", "555-1234"), (r"(?i)paris", "PARIS"), (r"\bcat\b", "concat"), (r"[]a]", "]"),
             (r"a{,2}b", "aab"), (r"(?P<x>a)(?P=x)", "aa"), (r"\w+", "été"), (r"^$", "")]  # fmt: skip
    for pattern, answer in cases:
        want = 1.0 if __import__("re").search(pattern, answer) else 0.0
        assert score("regex", f"<answer>{answer}</answer>", [pattern]) == want, pattern


def test_the_all_split_of_a_file_of_test_tasks_is_every_task(tmp_path):
    """`mode=eval eval.split=all` on tasks that all name the test split: the empty train split is no reason to
    refuse; only a file without any task is."""
    rows = [{"id": f"q{i}", "prompt": f"p{i}", "answer": "a", "split": "test"} for i in range(3)]
    b = bench(write_jsonl(tmp_path / "t.jsonl", rows))
    assert [t.task_id for t in b.load_split("all")] == ["q0", "q1", "q2"]
    with pytest.raises(DataError, match="the train split"):
        b.load_split("train")
    from skillopt_ray.cli.checks import check_benchmark_data

    skill = tmp_path / "skill.md"
    skill.write_text("- rule\n")
    data = cli.load(
        ["+experiment=custom", f"env.data_dir={tmp_path / 't.jsonl'}", "mode=eval", "eval.split=all",
         f"eval.skill_path={skill}"]
    )  # fmt: skip
    check_benchmark_data(data)  # the front door reads the split the run reads, and agrees
