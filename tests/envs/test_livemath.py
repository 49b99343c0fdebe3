"""LiveMathematicianBench as the reference runs it: raw-row normalisation, the seeded choice shuffle, the user message,
label parsing and scoring, the verification entry, the analysts' header, the item watchdog, the data layouts, the
built-in samples and the paper's model parameters. Expected values are the reference's (the values its own
functions return, where known)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from skillopt_envs import data_env_var, make, names
from skillopt_envs.base import DataError, EpisodeContext
from skillopt_envs.chat import ChatRequest, ChatResult
from skillopt_envs.livemathematicianbench import benchmark as bm
from skillopt_envs.livemathematicianbench import data as lm
from skillopt_envs.livemathematicianbench.prompts import system_prompt, user_prompt
from skillopt_envs.livemathematicianbench.samples import ensure_samples
from skillopt_envs.livemathematicianbench.scoring import evaluation_block, extract_answer, parse_label, score_reply
from skillopt_envs.livemathematicianbench.shuffle import item_seed, shuffle_choices

from skillopt_ray.prompts.render import trajectory_block

SHIPPED = Path(__file__).resolve().parents[2] / "envs" / "livemathematicianbench" / "splits"


def _choices(labels_texts):
    return [{"label": lb, "text": t} for lb, t in labels_texts]


GREEK = _choices(zip("ABCD", ["alpha", "beta", "gamma", "delta"]))
XS = _choices(zip("ABCD", ["x = 1", "x = 2", "x = 3", "x = 4"]))
CORRECT_B = {"label": "B", "text": "x = 2"}


# --- the choice shuffle -------------------------------------------------------------------------------------------


def test_item_seed_is_the_sha256_prefix():
    assert item_seed(42, "202602:22") == 13154253309490526428


@pytest.mark.parametrize(
    "seed,order",
    [
        (42, ["alpha", "delta", "beta", "gamma"]),
        (1043, ["alpha", "beta", "delta", "gamma"]),
        (2044, ["delta", "alpha", "beta", "gamma"]),
    ],
)
def test_shuffle_matches_the_reference_permutation(seed, order):
    out, correct = shuffle_choices("202602:22", GREEK, {"label": "C", "text": "gamma"}, seed)
    assert [c["text"] for c in out] == order and [c["label"] for c in out] == ["A", "B", "C", "D"]
    assert correct == {"label": "D", "text": "gamma"}  # gamma moved to D under each of the three seeds


def test_shuffle_follows_the_original_label_and_keeps_an_unmatched_correct_choice():
    out, correct = shuffle_choices("x:1", _choices([("a.", "one"), ("B", "two")]), {"label": "A", "text": "one"}, 7)
    assert correct == next(c for c in out if c["text"] == "one")  # original labels are compared normalised
    kept = {"label": "Q", "text": "not a choice", "extra": 1}
    assert shuffle_choices("x:1", GREEK, kept, 7)[1] == kept
    assert GREEK[0] == {"label": "A", "text": "alpha"}  # the stored choices are not touched


def _bench(tmp_path, **options):
    return bm.LiveMathBenchmark({"options": {"sample_dir": str(tmp_path / "s"), **options}})


def _task(item_id="202602:22", choices=GREEK, correct=None, **payload):
    from skillopt_envs.base import Task

    correct = correct or {"label": "C", "text": "gamma"}
    return Task(
        item_id, "implication", {"question": "Which holds?", "choices": choices, "correct_choice": correct, **payload}
    )


class FakeLLM:
    def __init__(self, *replies: str):
        self.replies, self.requests = list(replies), []

    async def chat(self, req: ChatRequest) -> ChatResult:
        self.requests.append(req)
        return ChatResult(self.replies[min(len(self.requests), len(self.replies)) - 1])


def _ctx(seed=42, turns=1, training=False):
    return EpisodeContext("k", training, turns, 0, seed)


def _run(b, task, llm, ctx=None):
    return asyncio.run(b.run_episode(task, "", llm, ctx or _ctx()))


def test_evaluation_uses_seed_42_and_training_the_batch_seed(tmp_path):
    b = _bench(tmp_path)
    task = _task()
    for seed, order in (
        (42, "alpha delta beta gamma"),
        (1043, "alpha beta delta gamma"),
        (None, "alpha delta beta gamma"),
    ):
        llm = FakeLLM("<answer>D</answer>")
        r = _run(b, task, llm, _ctx(seed))
        lines = llm.requests[0].messages[1]["content"].split("## Choices\n")[1].splitlines()
        assert [ln.split(". ", 1)[1] for ln in lines] == order.split()  # no seed given: the evaluation seed, 42
        assert r.hard == 1.0 and r.info["correct_label"] == "D"
    off = _bench(tmp_path, shuffle_choices=False)
    llm = FakeLLM("<answer>C</answer>")
    assert _run(off, task, llm).hard == 1.0
    assert "A. alpha\nB. beta\nC. gamma\nD. delta" in llm.requests[0].messages[1]["content"]


def test_episode_contexts_carry_the_batch_seed():
    """Evaluations play with the run's seed, training batches with seed + 1000·epoch + step (1043 for the first
    step at seed 42). The end-to-end test checks the orders the episodes of a real run showed."""
    from skillopt_ray.loop.evaluation import Evaluator
    from skillopt_ray.loop.schedule import Schedule

    env = type("Env", (), {"max_turns": 1, "history_window": 0})()
    ev = Evaluator(None, None, None, env, 0.1, lambda **kw: None, seed=43)
    assert ev.context("eval/x", False).seed == 43 and ev.context("train/e1s1", True, 1044).seed == 1044
    assert Schedule(None, None, 42).batch_seed(1, 1) == 1043 and Schedule(None, None, 42).batch_seed(2, 3) == 2045


# --- raw rows -----------------------------------------------------------------------------------------------------


def test_raw_row_normalisation_of_the_spec_example():
    row = {
        "month": "202511",
        "no": 3,
        "mcq": {"question": " What? ", "choices": {"B": "two", "A": "one", "C": ""}, "correct_choice": "b."},
    }
    it = lm.normalize_row(row, 0)
    assert it["id"] == "202511:3" and it["question"] == "What?"
    assert it["choices"] == _choices([("A", "one"), ("B", "two")])
    assert it["correct_choice"] == {"label": "B", "text": "two"}
    assert (it["theorem_type"], it["month"], it["no"]) == ([], "202511", 3)


def test_choice_lists_take_their_own_labels_or_the_position_letter():
    assert [c["label"] for c in lm.coerce_choices([{"content": "c1"}, "c2", {"label": "Z", "text": "z"}])] == [
        "A",
        "B",
        "Z",
    ]
    assert lm.coerce_choices(["p", "", "r"]) == _choices([("A", "p"), ("C", "r")])  # dropped after labelling: a gap


def test_correct_choice_rules():
    ch = _choices([("A", "one"), ("C", "three")])
    assert lm.coerce_correct({"label": " c) ", "text": ""}, ch) == ({"label": "C", "text": "three"}, ch)
    correct, with_b = lm.coerce_correct({"label": "B", "text": "two"}, ch)  # absent with text: appended, re-sorted
    assert correct == {"label": "B", "text": "two"} and [c["label"] for c in with_b] == ["A", "B", "C"]
    assert lm.coerce_correct("D:", ch) == ({"label": "D", "text": ""}, ch)


def test_ids_types_and_dropped_rows():
    base = {"mcq": {"question": "q", "choices": ["a", "b"], "correct_choice": "A"}}
    assert lm.normalize_row(base, 4)["id"] == "5"  # no month: the id is just `no` (row index + 1)
    assert lm.normalize_row(base, 4, "202601")["id"] == "202601:5"  # the month the file name carries
    typed = lm.normalize_row({**base, "theorem_type": ["", "existence", None, "uniqueness"]}, 0)
    assert typed["theorem_type"] == ["existence", "uniqueness"] and lm.task_type_of(typed) == "existence"
    assert lm.task_type_of(lm.normalize_row(base, 0)) == "math_mcq"
    assert lm.normalize_row({"question": "q", "choices": ["a"], "correct_choice": "A"}, 0) is not None  # no mcq key
    assert lm.normalize_row({"mcq": {"question": " ", "choices": ["a"], "correct_choice": "A"}}, 0) is None
    assert lm.normalize_row({"mcq": {"question": "q", "choices": [], "correct_choice": "A"}}, 0) is None
    assert lm.normalize_row({"mcq": {"question": "q", "choices": ["a"], "correct_choice": ""}}, 0) is None


# --- the user message ---------------------------------------------------------------------------------------------


def test_user_message_bytes_and_flags():
    ch = _choices([("A", "p"), ("B", "q")])
    assert user_prompt("Which holds?", ch) == "## Question\nWhich holds?\n\n## Choices\nA. p\nB. q"
    both = user_prompt("Which holds?", ch, theorem="T", sketch="SK", use_theorem=True, use_sketch=True)
    assert both == "## Question\nWhich holds?\n\n## Choices\nA. p\nB. q\n\n## Theorem\nT\n\n## Proof Sketch\nSK"
    assert user_prompt("Which holds?", ch, theorem="T", sketch="SK") == user_prompt("Which holds?", ch)  # flags off
    assert user_prompt("Which holds?", ch, sketch="SK", use_theorem=True, use_sketch=True).endswith(
        "B. q\n\n## Proof Sketch\nSK"
    )


def test_system_prompt_holds_the_skill_only_when_there_is_one():
    s = system_prompt("# S\n- RULE-x: compare options\n")
    assert "## Skill\n# S\n- RULE-x: compare options\n\n## Task Format" in s
    assert "## Answer Format" in s and "<answer>" in s and "quantifier" in s and "strict" in s
    assert "## Skill" not in system_prompt("  \n")


def test_flags_reach_the_episode(tmp_path):
    task = _task(theorem="T", sketch="SK")
    llm = FakeLLM("<answer>A</answer>")
    _run(_bench(tmp_path, use_theorem=True, use_sketch=True), task, llm)
    assert llm.requests[0].messages[1]["content"].endswith("\n\n## Theorem\nT\n\n## Proof Sketch\nSK")


# --- labels and scores --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply,label,right",
    [
        ("<answer>b.</answer>", "B", True),
        ("<answer>B)</answer>", "B", True),
        ("<answer> b ) </answer>", "B", True),
        ("<answer>(B)</answer>", "(B", False),
        ("<answer>**B**</answer>", "**B**", False),
        ("<answer>X = 2</answer>", "B", True),
        ("<answer>B. x = 2</answer>", "B", True),
        ("<answer>B and C</answer>", "B", True),
        ("<answer>Option B</answer>", "OPTION B", False),
        ("<answer>b</answer><answer>C</answer>", "C", False),
        ("Final:\nB", "B", True),
        ("Reasoning\n<answer>B", "<ANSWER>B", False),
        ("The answer is B", "THE ANSWER IS B", False),
    ],
)
def test_label_parsing_table(reply, label, right):
    s = score_reply(reply, XS, CORRECT_B)
    assert s.label == label and s.em == (1.0 if right else 0.0)


def test_extraction_and_parse_order():
    assert extract_answer("<ANSWER>\n c \n</Answer> tail") == "c"
    assert extract_answer("  \n\n ") == "" and extract_answer("one\n\n two  \n") == "two"
    # a label that is also another choice's text: the label rule comes first
    assert parse_label("a", _choices([("A", "b"), ("B", "a")])) == "A"
    assert parse_label("", XS) == ""


def test_fail_reason_fields_and_verification_entry():
    wrong = score_reply("<answer>C</answer>", XS, CORRECT_B)
    assert wrong.fail_reason == "MCQ=0: predicted 'C' but expected 'B'"
    block = evaluation_block("Which x?", wrong)
    assert block.split("\n") == [
        "[EVALUATION RESULT]",
        "Question: Which x?",
        "Predicted label: 'C'",
        "Predicted text: 'x = 3'",
        "Correct label: 'B'",
        "Correct text: 'x = 2'",
        "Exact Match: 0.0",
    ]
    assert evaluation_block("q", score_reply("<answer>B</answer>", XS, CORRECT_B)).endswith("Exact Match: 1.0")
    empty = score_reply("<answer></answer>", XS, CORRECT_B)
    assert (empty.label, empty.predicted_answer, empty.predicted_text) == ("", "", "")
    invalid = score_reply("<answer>Option B</answer>", XS, CORRECT_B)
    assert invalid.predicted_text == "" and invalid.fail_reason == "MCQ=0: predicted 'OPTION B' but expected 'B'"


# --- the episode and what the analysts see ------------------------------------------------------------------------


def test_episode_record_and_the_analysts_header(tmp_path):
    b = _bench(tmp_path, shuffle_choices=False)
    task = _task(choices=XS, correct=CORRECT_B)
    llm = FakeLLM("I compare.\n<answer>C</answer>")
    r = _run(b, task, llm)
    req = llm.requests[0]
    assert req.max_tokens == 16384 and req.key == "k/202602:22/t0" and req.role == "target"
    assert (r.hard, r.soft, r.n_turns, r.task_type, r.task_description) == (0.0, 0.0, 1, "implication", "")
    assert r.fail_reason == "MCQ=0: predicted 'C' but expected 'B'"
    assert r.trajectory[0] == {"type": "message", "turn": 1, "content": "I compare.\n<answer>C</answer>"}
    assert len(r.trajectory) == 2 and r.trajectory[1]["role"] == "system"  # no user entry
    info = r.info
    assert (info["predicted_answer"], info["predicted_label"], info["predicted_text"]) == ("C", "C", "x = 3")
    assert (info["correct_label"], info["correct_text"], info["agent_ok"]) == ("B", "x = 2", True)
    text = trajectory_block(r, 1)
    head = text.split("\n")[:5]
    assert head == [
        "### Trajectory 1 (id=202602:22)",
        "Task: ",
        "Task type: implication",
        "Failure reason: MCQ=0: predicted 'C' but expected 'B'",
        "Steps: 1",
    ]
    assert "#### Target System Prompt\n" in text and "#### Target User Prompt\n## Question\nWhich holds?" in text
    assert "[agent] I compare.\n<answer>C</answer>\n[verification] [EVALUATION RESULT]" in text
    assert "Correct text: 'x = 2'" in text


def test_later_turns_only_without_an_answer_tag(tmp_path):
    b = _bench(tmp_path, shuffle_choices=False)
    task = _task(choices=XS, correct=CORRECT_B)
    llm = FakeLLM("thinking, no tag", "<answer>B</answer>", "never asked")
    r = _run(b, task, llm, _ctx(turns=3))
    assert len(llm.requests) == 2 and r.n_turns == 2 and r.hard == 1.0
    second = llm.requests[1].messages
    assert [m["role"] for m in second] == ["system", "user"]  # no history: [system, new user]
    assert "thinking, no tag" in second[1]["content"] and "## Choices" in second[1]["content"]
    assert [e.get("turn") for e in r.trajectory] == [1, 2, None]
    one = FakeLLM("no tag at all")
    assert _run(b, task, one).n_turns == 1 and len(one.requests) == 1  # max_turns 1: scored as it is


def test_watchdog_is_360_seconds_and_none_when_exec_timeout_is_off(tmp_path, monkeypatch):
    assert bm.task_timeout(300) == 360 and bm.task_timeout(0) is None and bm.task_timeout(-1) is None
    seen = []

    async def expire(coro, timeout):
        seen.append(timeout)
        coro.close()
        raise asyncio.TimeoutError

    monkeypatch.setattr(bm.asyncio, "wait_for", expire)
    r = _run(_bench(tmp_path), _task(), FakeLLM("<answer>D</answer>"))
    assert seen == [360.0]
    assert (r.fail_reason, r.hard, r.soft, r.n_turns) == ("task-timeout-360s", 0.0, 0.0, 0)
    assert "phase" not in r.info and r.info["correct_label"] == "D" and r.info["agent_ok"] is False
    off = _run(_bench(tmp_path, exec_timeout=0), _task(), FakeLLM("<answer>D</answer>"))
    assert seen == [360.0] and off.hard == 1.0  # no watchdog at all


def test_options_are_checked():
    with pytest.raises(DataError, match="unknown env.options key"):
        bm.LiveMathOptions.parse({"image_detail": "auto"})
    with pytest.raises(DataError, match="max_completion_tokens"):
        bm.LiveMathOptions.parse({"max_completion_tokens": 0})


# --- data layouts -------------------------------------------------------------------------------------------------


def test_registered_with_its_data_variable():
    assert "livemathematicianbench" in names() and data_env_var("livemathematicianbench") == "LIVEMATH_DATA"


def test_paper_split_facts_ship_with_the_licence_notice():
    facts = json.loads((SHIPPED / "split_manifest.json").read_text())
    assert facts["counts"] == lm.PAPER_COUNTS == {"train": 35, "val": 17, "test": 125}
    assert {s: sum(m.values()) for s, m in facts["months"].items()} == lm.PAPER_COUNTS
    assert facts["months"] == lm.PAPER_MONTHS and facts["ids_included"] is True
    notice = (SHIPPED / "NOTICE").read_text()
    assert "MIT License" in notice and "microsoft/SkillOpt" in notice and "ships none of it" in notice


def _raw_tree(root: Path) -> None:
    rows = [
        {
            "no": n,
            "theorem_type": ["existence"],
            "mcq": {"question": f"q{n}", "choices": ["a", "b"], "correct_choice": "B"},
        }
        for n in (1, 2, 3)
    ]
    for month in ("202511", "202512"):
        (root / "data" / month).mkdir(parents=True)
        (root / "data" / month / f"qa_{month}_final.json").write_text(json.dumps(rows))


def _manifest(root: Path, ids: dict[str, list[str]]) -> None:
    for split, xs in ids.items():
        (root / split).mkdir(parents=True)
        (root / split / "items.json").write_text(json.dumps([{"id": i} for i in xs]))


def test_raw_files_need_a_manifest_which_picks_the_splits(tmp_path, monkeypatch):
    _raw_tree(tmp_path / "raw")
    monkeypatch.setenv("LIVEMATH_DATA", str(tmp_path / "raw"))
    with pytest.raises(DataError, match="set env.manifest_dir"):
        bm.LiveMathBenchmark({}).load_split("train")
    _manifest(tmp_path / "man", {"train": ["202512:2", "202511:1"], "val": ["202511:3"], "test": ["202512:9"]})
    b = bm.LiveMathBenchmark({"manifest_dir": str(tmp_path / "man")})
    train = b.load_split("train")
    assert [t.task_id for t in train] == ["202512:2", "202511:1"] and train[0].task_type == "existence"
    assert train[0].payload["correct_choice"] == {"label": "B", "text": "b"}
    assert [t.task_id for t in b.load_split("selection")] == ["202511:3"]
    with pytest.raises(DataError, match=r"1 of 1 ids of the test split .* \(first: 202512:9\)"):
        b.load_split("valid_unseen")
    with pytest.raises(DataError, match="unknown LiveMathematicianBench split"):
        b.load_split("dev")


def test_split_folders_are_used_as_stored(tmp_path):
    item = {
        "id": "202601:4",
        "question": "Q?",
        "choices": [{"label": "a", "text": "one"}, {"label": "b", "text": "two"}],
        "correct_choice": {"label": "b", "text": "two"},
        "theorem_type": ["uniqueness"],
    }
    for split in lm.SPLITS:
        (tmp_path / "d" / split).mkdir(parents=True)
        (tmp_path / "d" / split / "items.json").write_text(json.dumps([item]))
    b = bm.LiveMathBenchmark({"data_dir": str(tmp_path / "d"), "options": {"shuffle_choices": False}})
    task = b.load_split("test")[0]
    assert task.payload["choices"] == item["choices"] and task.task_type == "uniqueness"  # not re-normalised
    assert _run(b, task, FakeLLM("<answer>B</answer>")).hard == 1.0  # labels compared normalised
    assert "1/1/1 train/val/test (the paper's split has 35/17/125)" in b.data_note()
    (tmp_path / "d" / "val" / "items.json").write_text(json.dumps([{"id": "x", "question": "q"}]))
    with pytest.raises(DataError, match="lacks one of id, question, choices, correct_choice") as e:
        b.load_split("val")
    assert str(tmp_path / "d" / "val" / "items.json") in str(e.value)
    with pytest.raises(DataError, match="does not exist"):
        bm.LiveMathBenchmark({"data_dir": str(tmp_path / "nowhere")})
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds neither train/ val/ test/ item files nor qa_"):
        bm.LiveMathBenchmark({"data_dir": str(tmp_path / "empty")}).load_split("train")
    # a manifest picks from the folders' items, whatever folder holds them
    _manifest(tmp_path / "m", {"train": ["202601:4"], "val": [], "test": []})
    picked = bm.LiveMathBenchmark({"data_dir": str(tmp_path / "d"), "manifest_dir": str(tmp_path / "m")})
    (tmp_path / "d" / "val" / "items.json").unlink()
    assert [t.task_id for t in picked.load_split("train")] == ["202601:4"]


# --- built-in samples ---------------------------------------------------------------------------------------------


def test_samples_are_raw_rows_with_four_choices_and_one_correct_label(tmp_path):
    root = ensure_samples(str(tmp_path / "s"))
    files = lm.raw_files(root / "data")
    assert [f.name for f in files] == ["qa_209901_final.json", "qa_209902_final.json"]
    for f in files:
        for row in json.loads(f.read_text()):
            assert set(row) == {"no", "paper_link", "theorem", "sketch", "theorem_type", "mcq"}
            assert set(row["mcq"]) == {"question", "choices", "correct_choice"} and len(row["mcq"]["choices"]) == 4
    b = make("livemathematicianbench", {"options": {"sample_dir": str(root)}})
    tasks = b.load_split("all")
    assert [len(b.load_split(s)) for s in lm.SPLITS] == [8, 4, 6] and len({t.task_id for t in tasks}) == 18
    for t in tasks:
        ch, correct = t.payload["choices"], t.payload["correct_choice"]
        assert len(ch) == 4 and len({c["text"] for c in ch}) == 4
        assert sum(c["label"] == correct["label"] for c in ch) == 1
        assert next(c["text"] for c in ch if c["label"] == correct["label"]) == correct["text"]
    assert "built-in sample items" in b.data_note() and "8/4/6" in b.data_note()
    assert ensure_samples(str(tmp_path / "s")) == root  # made once


# --- the paper's model parameters ---------------------------------------------------------------------------------


def test_paper_preset_sends_the_reasoning_model_parameters(tmp_path):
    """llm=paper composes with the experiment; an episode over real HTTP asks 16384 completion tokens, no temperature."""
    from scripted_server import ScriptedServer

    from skillopt_ray import cli
    from skillopt_ray.config import LLMConfig, LLMRoleConfig
    from skillopt_ray.llm.gateway import Gateway, LLMHandle

    data = cli.plain(cli.compose(["+experiment=livemathematicianbench", "llm=paper"]))
    env = data["env"]
    assert env["name"] == "livemathematicianbench" and env["max_turns"] == 1 and data["seed"] == 42
    opts = bm.LiveMathOptions.parse(env["options"])
    assert opts.max_completion_tokens == 16384 and bm.task_timeout(opts.exec_timeout) == 360
    assert opts.shuffle_choices and not opts.use_theorem and not opts.use_sketch
    target = data["llm"]["target"]
    assert target["max_completion_tokens"] == 16384 and target.get("temperature") is None
    assert target["reasoning_effort"] == "medium"
    b = _bench(tmp_path)
    task = b.load_split("val")[0]
    right = task.payload["correct_choice"]["text"]
    with ScriptedServer(
        policy=lambda body, headers: f"Checking.\n<answer>{right}</answer>", reasoning_model=True
    ) as srv:
        role = LLMRoleConfig(
            provider="openai", model="m", base_url=srv.base_url, timeout_s=5, max_completion_tokens=16384
        )
        gw = Gateway(LLMConfig(backend="compatible", target=role, optimizer=LLMRoleConfig(**vars(role))), None)
        loop = asyncio.new_event_loop()
        try:
            r = loop.run_until_complete(b.run_episode(task, bm.SEED_SKILL, LLMHandle(gw), _ctx()))
            loop.run_until_complete(gw.close())
        finally:
            loop.close()
        body = srv.state.bodies[-1]
    assert r.hard == 1.0  # the choice text names the right option whatever the order
    assert body["max_completion_tokens"] == 16384 and "temperature" not in body and "max_tokens" not in body
    assert body["messages"][1]["content"].startswith("## Question\n")


def test_seed_skill_covers_the_reference_sections():
    s = bm.SEED_SKILL
    assert s.startswith("# ") and 600 < len(s) < 1600
    for heading in ("## Option Comparison", "## Theorem-Level Precision", "## Hypotheses", "## Final Answer"):
        assert heading in s
