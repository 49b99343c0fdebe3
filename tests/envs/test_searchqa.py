"""SearchQA as the reference runs it: answer extraction, scoring, context truncation, the target
prompt, what the analyst sees, the shipped paper split with its aliases, and item materialisation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from skillopt_envs.base import DataError, EpisodeContext
from skillopt_envs.chat import ChatResult
from skillopt_envs.searchqa import data as qa_data
from skillopt_envs.searchqa.benchmark import SEED_SKILL, SearchQABenchmark, extract_answer, truncate_context
from skillopt_envs.searchqa.scoring import normalize, score, score_answer, token_f1

SHIPPED = Path(__file__).resolve().parents[2] / "envs" / "searchqa" / "splits"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "searchqa" / "searchqa_id_split"


# --- answers and scores -------------------------------------------------------------------------------------------


def test_last_answer_tag_wins_else_last_non_empty_line():
    assert extract_answer("Reasoning first.\nLondon\n") == "London"
    assert score("London", ["london"]) == (1.0, 1.0)
    assert extract_answer("<ANSWER>Paris</ANSWER> on second thought <answer>\n  Lyon \n</answer>\nbye") == "Lyon"
    assert extract_answer("I think <Answer>Rome</Answer>") == "Rome"
    assert extract_answer("  \n\n  ") == "" and extract_answer("") == ""
    assert extract_answer("one line only  ") == "one line only"


def test_em_f1_and_sub_em():
    s = score_answer("New York City", ["new york"])
    assert (s.em, s.sub_em) == (0, 1) and s.f1 == pytest.approx(0.8)
    assert normalize("The  Eiffel Tower!") == "eiffel tower"
    assert score_answer("the Eiffel tower", ["Paris", "Eiffel Tower"]) == score_answer("eiffel tower", ["eiffel tower"])
    assert score_answer("Paris", ["Eiffel Tower", "paris."]).em == 1  # best over the golds
    assert score_answer("Paris", ["the", "Paris"]).f1 == 1.0  # a gold that normalises to nothing is skipped
    assert score_answer("", ["London"]) == score_answer("", ["London"]) and score_answer("", ["London"]).f1 == 0.0
    assert score_answer("", ["the", "London"]).f1 == 1.0  # empty prediction, an empty gold
    assert score_answer("Lyon", ["London"]).sub_em == 0
    assert token_f1("a", "the") == 1.0
    assert score("anything", []) == (0.0, 0.0)


# --- context truncation -------------------------------------------------------------------------------------------


def test_short_contexts_pass_unchanged():
    ctx = "[DOC] [TLE] a [PAR]  spaced   out\n\n\ttext " + "x" * 5950
    assert len(ctx) <= 6000 and truncate_context(ctx) == ctx
    exactly = "y" * 6000
    assert truncate_context(exactly) == exactly


def test_long_contexts_are_cut_by_the_doc_rule():
    docs = [f" [TLE] t{i} [PAR] " + "w" * 1970 for i in range(5)]  # each piece 1986 chars: three fit in 6000 (5968)
    ctx = "".join("[DOC]" + d for d in docs)
    cut = truncate_context(ctx)
    # the empty first piece is taken bare, so the first document follows bare too: it loses its marker
    assert cut == docs[0] + "[DOC]" + docs[1] + "[DOC]" + docs[2]
    assert len(cut) <= 6000 and not cut.startswith("[DOC]") and cut.count("[DOC]") == 2
    assert truncate_context("abcdefghij" * 5, 20) == "abcdefghijabcdefghij\n...[truncated]"  # nothing fits
    assert truncate_context("[DOC]" + "z" * 7000) == "[DOC]" + "z" * 5995 + "\n...[truncated]"
    assert truncate_context("head [DOC] " + "q" * 30, 25) == "head "  # stops before the piece that overflows


# --- the episode --------------------------------------------------------------------------------------------------


class FakeLLM:
    def __init__(self, reply: str):
        self.reply, self.requests = reply, []

    async def chat(self, req):
        self.requests.append(req)
        return ChatResult(self.reply)


def _task(b: SearchQABenchmark):
    return b.load_split("val")[0]


def test_prompt_and_what_the_analyst_sees(tmp_path):
    b = SearchQABenchmark({"options": {"sample_dir": str(tmp_path / "s")}})
    task = _task(b)
    llm = FakeLLM("The passages agree.\nSo the answer is\nNowhere Town")
    ctx = EpisodeContext("rollout/e1s1", True, 1, 0)
    r = asyncio.run(b.run_episode(task, "# My skill\n- RULE-qa: read all documents\n", llm, ctx))
    system, user = (m["content"] for m in llm.requests[0].messages)
    assert "## Skill\n# My skill\n- RULE-qa: read all documents\n\n## Task Format" in system
    assert "## Answer Format" in system and "<answer>" in system and "step by step" in system
    assert user == f"## Context\n{task.payload['context']}\n\n## Question\n{task.payload['question']}"
    assert llm.requests[0].key == f"rollout/e1s1/{task.task_id}/t0"
    gold = task.payload["answers"]
    assert r.hard == 0.0 and r.soft == 0.0 and r.task_type == "qa" and r.n_turns == 1
    assert r.fail_reason == f"EM=0: predicted 'Nowhere Town' but expected {gold!r}"
    assert r.task_description == "" and r.info["header_task_type"] == ""
    assert r.info["target_system_prompt"] == system and r.info["target_user_prompt"] == user
    assert (r.info["predicted_answer"], r.info["gold_answers"], r.info["em"], r.info["sub_em"]) == (
        "Nowhere Town",
        gold,
        0,
        0,
    )
    assert r.trajectory[0] == {
        "type": "message",
        "turn": 1,
        "content": "The passages agree.\nSo the answer is\nNowhere Town",
    }
    assert r.trajectory[1] == {
        "role": "system",
        "content": (
            f"[EVALUATION RESULT]\nQuestion: {task.payload['question']}\nPredicted answer: 'Nowhere Town'\n"
            f"Gold answers: {gold!r}\nExact Match: 0.0\nF1: 0.0000"
        ),
    }
    right = asyncio.run(b.run_episode(task, "", FakeLLM(f"thinking\n<answer>{gold[0].upper()}</answer>"), ctx))
    assert right.hard == 1.0 and right.fail_reason == "" and right.info["em"] == 1 and right.info["f1"] == 1.0
    assert "\nF1: 1.0000" in right.trajectory[1]["content"]
    empty = FakeLLM("<answer>x</answer>")
    asyncio.run(b.run_episode(task, "  \n", empty, ctx))
    assert "## Skill" not in empty.requests[0].messages[0]["content"]  # a blank skill leaves the section out


def test_seed_skill_is_empty_of_rules():
    lines = [ln for ln in SEED_SKILL.splitlines() if ln.strip()]
    assert len(lines) == 2 and lines[0].startswith("# ") and len(SEED_SKILL) < 160


def test_episode_over_real_http(tmp_path, run_loop):
    from scripted_server import ScriptedServer

    from skillopt_ray.config import LLMConfig, LLMRoleConfig
    from skillopt_ray.llm.gateway import Gateway, LLMHandle

    b = SearchQABenchmark({"options": {"sample_dir": str(tmp_path / "s")}})
    task = _task(b)
    gold = task.payload["answers"][0]
    with ScriptedServer(policy=lambda body, headers: f"Reading the documents.\n{gold}\n") as srv:
        r = LLMRoleConfig(provider="openai", model="m", base_url=srv.base_url, timeout_s=5)
        gw = Gateway(LLMConfig(backend="compatible", target=r, optimizer=LLMRoleConfig(**vars(r))), None)
        res = run_loop(b.run_episode(task, SEED_SKILL, LLMHandle(gw), EpisodeContext("k", False, 1, 0)))
        run_loop(gw.close())
    assert res.hard == 1.0 and res.info["predicted_answer"] == gold


@pytest.fixture()
def run_loop():
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()


# --- splits -------------------------------------------------------------------------------------------------------


def _ids(split_dir: Path, split: str) -> list[str]:
    return [x["id"] for x in json.loads((split_dir / split / "items.json").read_text())]


def _write_items(root: Path, ids_by_split: dict[str, list[str]]) -> None:
    for split, ids in ids_by_split.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        items = [{"id": i, "question": f"q {i}?", "context": f"[DOC] about {i}", "answers": [f"a-{i}"]} for i in ids]
        (root / split / "items.json").write_text(json.dumps(items))


def test_the_paper_split_ships_with_its_licence():
    assert {s: len(_ids(SHIPPED, s)) for s in qa_data.SPLITS} == {"train": 400, "val": 200, "test": 1400}
    assert (
        "MIT License" in (SHIPPED / "LICENSE-SkillOpt").read_text()
        and "microsoft/SkillOpt" in (SHIPPED / "LICENSE-SkillOpt").read_text()
    )
    if SHARED.is_dir():  # the same ids as SkillOpt's manifests
        assert all(_ids(SHIPPED, s) == _ids(SHARED, s) for s in qa_data.SPLITS)


def test_real_data_uses_the_paper_split_by_default_with_aliases(tmp_path):
    ids = {s: _ids(SHIPPED, s) for s in qa_data.SPLITS}
    # the items sit in other folders than the paper's and there are extra ones: the manifest decides
    _write_items(
        tmp_path / "d",
        {"train": ids["test"][:700] + ["extra-1"], "val": ids["train"] + ids["val"], "test": ids["test"][700:]},
    )
    b = SearchQABenchmark({"data_dir": str(tmp_path / "d")})
    sizes = {s: len(b.load_split(s)) for s in ("train", "val", "valid_seen", "selection", "test", "valid_unseen")}
    assert sizes == {"train": 400, "val": 200, "valid_seen": 200, "selection": 200, "test": 1400, "valid_unseen": 1400}
    assert [t.task_id for t in b.load_split("valid_unseen")] == ids["test"]  # manifest order
    assert len(b.load_split("all")) == 2000
    assert b.data_note().endswith("400/200/1400 train/val/test items as in the paper")
    with pytest.raises(DataError, match="unknown SearchQA split"):
        b.load_split("dev")
    # env.options.split_source=folders: the data folder's own splits, with the size note
    f = SearchQABenchmark({"data_dir": str(tmp_path / "d"), "options": {"split_source": "folders"}})
    assert len(f.load_split("train")) == 701 and "split sizes differ from the paper's 400/200/1400" in f.data_note()


def test_missing_items_stop_or_are_skipped_with_a_note(tmp_path):
    ids = {s: _ids(SHIPPED, s) for s in qa_data.SPLITS}
    _write_items(tmp_path / "d", {"train": ids["train"][:10], "val": ids["val"][:5], "test": ids["test"][:7]})
    b = SearchQABenchmark({"data_dir": str(tmp_path / "d")})
    with pytest.raises(DataError, match=r"390 of 400 ids of the train split .* have no item"):
        b.load_split("train")
    assert "the run stops" in b.data_note()
    s = SearchQABenchmark({"data_dir": str(tmp_path / "d"), "options": {"skip_missing_items": True}})
    assert len(s.load_split("selection")) == 5
    note = s.data_note()
    assert "only 10/5/7 of its 400/200/1400" in note and "split sizes differ from the paper's 400/200/1400" in note


def test_manifest_dir_overrides_and_samples_use_their_folders(tmp_path):
    _write_items(tmp_path / "d", {"train": ["q0", "q1", "q2"], "val": ["q3", "q4"], "test": ["q5"]})
    man = tmp_path / "man"
    for split, ids in (("train", ["q2"]), ("val", ["q0", "q5"]), ("test", ["q1"])):
        (man / split).mkdir(parents=True)
        (man / split / "items.json").write_text(json.dumps([{"id": i} for i in ids]))
    b = SearchQABenchmark({"data_dir": str(tmp_path / "d"), "manifest_dir": str(man)})
    assert [t.task_id for t in b.load_split("valid_seen")] == ["q0", "q5"]
    assert "split sizes differ from the paper's" in b.data_note()
    samples = SearchQABenchmark({"options": {"sample_dir": str(tmp_path / "s")}})
    assert len(samples.load_split("train")) == 12 and "built-in sample items" in samples.data_note()


@pytest.mark.parametrize(
    "content,needle",
    [
        ("{not json", "is not valid JSON"),
        ('{"id": 1}', "must hold a JSON list"),
        ('[{"id": "x"}]', "lacks one of id, question, context, answers"),
        ('[{"id": "x", "question": "q", "context": "c", "answers": 3}]', "answers as a non-empty list of strings"),
    ],
)
def test_malformed_items_name_the_file(tmp_path, content, needle):
    _write_items(tmp_path / "d", {"train": ["a"], "val": ["b"]})
    (tmp_path / "d" / "test").mkdir()
    (tmp_path / "d" / "test" / "items.json").write_text(content)
    with pytest.raises(DataError, match=needle) as e:
        SearchQABenchmark({"data_dir": str(tmp_path / "d"), "options": {"split_source": "folders"}}).load_split("test")
    assert str(tmp_path / "d" / "test" / "items.json") in str(e.value)


def test_malformed_manifest_names_the_file(tmp_path):
    _write_items(tmp_path / "d", {"train": ["a"], "val": ["b"], "test": ["c"]})
    (tmp_path / "m" / "val").mkdir(parents=True)
    (tmp_path / "m" / "val" / "items.json").write_text('["a", "b"]')
    with pytest.raises(DataError, match="is not an object with an id") as e:
        SearchQABenchmark({"data_dir": str(tmp_path / "d"), "manifest_dir": str(tmp_path / "m")}).load_split("val")
    assert "items.json" in str(e.value)


# --- materialisation ----------------------------------------------------------------------------------------------


def test_materialize_from_dataset_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from skillopt_envs.searchqa.materialize import main

    ids = {s: _ids(SHIPPED, s) for s in qa_data.SPLITS}
    rows = [
        {"key": i, "question": f"q {i}", "context": f"[DOC] c {i}", "answers": [f"a {i}"], "labels": []}
        for s in qa_data.SPLITS
        for i in ids[s]
    ] + [{"key": "unused", "question": "q", "context": "c", "answers": ["a"], "labels": []}]
    src = tmp_path / "hf"
    src.mkdir()
    pq.write_table(pa.Table.from_pylist(rows[:1000]), src / "train-00000.parquet")
    (src / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[1000:]))
    assert main(["--source", str(src), "--out", str(tmp_path / "out")]) == 0
    b = SearchQABenchmark({"data_dir": str(tmp_path / "out")})
    val = b.load_split("val")
    assert [t.task_id for t in val] == ids["val"] and val[0].payload["answers"] == [f"a {ids['val'][0]}"]
    assert b.data_note().endswith("as in the paper")
    (src / "dup.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert main(["--source", str(src), "--out", str(tmp_path / "out2")]) == 2
    (src / "dup.jsonl").unlink()
    (src / "validation.jsonl").write_text("")
    assert main(["--source", str(src), "--out", str(tmp_path / "out3")]) == 2
