"""DocVQA as the reference runs it: ANLS and its threshold, answer extraction, gold parsing, the CSV loader, the
multimodal request, the turn loop, the item watchdog, what the analysts see, the rendered sample pages, the
text-layer fallback for targets without vision, and materialisation from the public data's formats.

Expected values are computed from the reference's rules (ANLS = 1 - distance / longer length, 0 from 0.5 on)."""

from __future__ import annotations

import asyncio
import base64
import csv
import json
from pathlib import Path

import pytest
from skillopt_envs.base import DataError, EpisodeContext
from skillopt_envs.chat import ChatRequest, ChatResult, content_text
from skillopt_envs.docvqa import benchmark as bm
from skillopt_envs.docvqa import data as dv
from skillopt_envs.docvqa import samples
from skillopt_envs.docvqa.benchmark import SEED_SKILL, DocVQABenchmark, task_timeout
from skillopt_envs.docvqa.scoring import anls, extract_answer, gold_strings, levenshtein, score_answer

SHIPPED = Path(__file__).resolve().parents[2] / "envs" / "docvqa" / "splits"


def _reply_score(reply: str, golds):
    return score_answer(extract_answer(reply), golds)


# --- the evaluator (the reference's DocVQA scoring rules and the values its evaluator returns) --------------------


def test_anls_value_partial_credit_has_no_fail_reason():
    s = _reply_score("<answer>ITC Ltd</answer>", ["ITC Limited"])
    assert levenshtein("itc ltd", "itc limited") == 4
    assert s.anls == pytest.approx(1 - 4 / 11) and round(s.anls, 4) == 0.6364
    assert s.hard == 0 and s.fail_reason == ""


def test_anls_threshold_is_inclusive():
    s = _reply_score("<answer>5</answer>", ["5%"])  # distance 1 over length 2: exactly 0.5
    assert s.anls == 0.0 and s.hard == 0
    assert s.fail_reason == "predicted '5' but expected one of ['5%']"


def test_case_and_whitespace_only_punctuation_kept():
    s = _reply_score("<answer>hello  world</answer>", ["Hello World"])
    assert (s.anls, s.hard) == (1.0, 1)
    assert anls("$1,200", ["1,200"]) == pytest.approx(1 - 1 / 6) and round(anls("$1,200", ["1,200"]), 4) == 0.8333


def test_max_over_golds():
    assert anls("Tobacco", ["tobacco", "The Tobacco Institute"]) == 1.0
    assert anls("Tobacco Institute", ["The Tobacco Institute"]) == pytest.approx(1 - 4 / 21)


def test_last_tag_wins_unclosed_tag_falls_back_to_the_last_line():
    assert extract_answer("<answer>a</answer> then <answer>b</answer>") == "b"
    unclosed = "<answer>a</answer> junk <answer>b"
    assert extract_answer(unclosed) == unclosed and anls(extract_answer(unclosed), ["a"]) == 0.0
    assert extract_answer("Reasoning...\n0.28\n") == "0.28"
    assert extract_answer("<ANSWER> Mixed Case </Answer>") == "Mixed Case"
    assert extract_answer("<answer>multi\nline</answer>") == "multi\nline"  # newlines kept in the body
    assert extract_answer("   \n ") == "" and extract_answer("") == ""


def test_empty_gold_list_scores_an_empty_answer_right():
    assert gold_strings([]) == [""]
    s = _reply_score("<answer></answer>", [])
    assert (s.anls, s.hard, s.fail_reason) == (1.0, 1, "")
    x = _reply_score("<answer>x</answer>", [])
    assert (x.anls, x.hard) == (0.0, 0) and x.fail_reason == "predicted 'x' but expected one of []"


def test_hard_threshold_and_soft_is_raw_anls():
    gold = "a" * 1000
    one_off = "a" * 999 + "b"  # 1 - 1/1000 = 0.999: hard
    assert _reply_score(one_off, [gold]).anls == pytest.approx(0.999) and _reply_score(one_off, [gold]).hard == 1
    gold2 = "a" * 999
    s = _reply_score("a" * 998 + "b", [gold2])  # 1 - 1/999 < 0.999: not hard, soft is the float
    assert s.hard == 0 and s.anls == pytest.approx(1 - 1 / 999)


@pytest.mark.parametrize(
    "pred,gold,value",
    [
        ("Fred", "Freddy", 1 - 2 / 6),
        ("abc", "abd", 1 - 1 / 3),
        ("ab", "cd", 0.0),
        ("$1,200", "1,200", 1 - 1 / 6),
        ("1200", "1,200", 1 - 1 / 5),
        ("12 Feb", "12 February", 1 - 5 / 11),
        ("Tobacco Institute", "The Tobacco Institute", 1 - 4 / 21),
        ("multi\nline", "multi line", 1.0),
    ],
)
def test_observed_anls_values(pred, gold, value):
    assert anls(pred, [gold]) == pytest.approx(value)


def test_reversed_tags_use_the_whole_text():
    text = "</answer>wrong<answer>"
    assert extract_answer(text) == text and anls(extract_answer(text), ["wrong"]) == 0.0


def test_gold_parsing_observed_values():
    assert gold_strings('{"answers": ["a"]}') == ["a"]
    assert gold_strings("[oops") == ["[oops"]
    assert gold_strings([5, {"text": "t"}, {"zz": 1}]) == ["5", "t", "{'zz': 1}"]
    assert gold_strings(7) == ["7"]
    assert gold_strings(None) == [""] and gold_strings("") == [""]
    assert gold_strings({"ground_truth": "g"}) == ["g"] and gold_strings({"q": 1}) == ["{'q': 1}"]
    assert gold_strings("['x', 'y']") == ["x", "y"]  # not JSON, a Python literal


# --- the CSV loader ------------------------------------------------------------------------------------------------


def test_csv_answer_and_question_parsing():
    assert dv.parse_answers("['a', 'b ']") == ["a", "b"]
    assert dv.parse_answers("plain") == ["plain"]
    assert dv.parse_answers("['', 'y']") == ["y"]
    assert dv.parse_answers("") == [] and dv.parse_answers(None) == []
    assert dv.parse_answers("42") == ["42"]
    assert dv.split_question("What is X? document_path: imgs/a.png") == ("What is X?", "imgs/a.png")


def _write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = sorted({k for r in rows for k in r})
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def test_csv_rows_become_items_as_the_reference_reads_them(tmp_path):
    root = tmp_path / "data"
    _write_csv(
        root / "train" / "b.csv",
        [
            {"id": " 7 ", "question": "Q? document_path: pages/p7.png", "ground_truth": "['g']", "category": "cat"},
            {"questionId": "8", "id": "x", "question": "R?", "answer": "", "image_path": "/abs/p8.png", "topic": ""},
        ],
    )
    _write_csv(
        root / "train" / "a_first.csv",
        [{"questionId": "1", "question": "S?", "answer": "['s']", "image_path": "p.png"}],
    )
    items = dv.load_split_items(root, "train", root)
    assert [it["id"] for it in items] == ["1"]  # the first CSV by name
    (root / "train" / "a_first.csv").unlink()
    a, b = dv.load_split_items(root, "train", root)
    assert (a["id"], a["question"], a["answers"], a["answer"]) == ("7", "Q?", ["g"], "g")
    assert a["image_path"] == str(root / "pages/p7.png") and a["image_paths"] == [a["image_path"]]
    assert a["task_type"] == a["subtask"] == "cat"
    assert (b["id"], b["answers"], b["answer"], b["task_type"], b["image_path"]) == (
        "8",
        [],
        "",
        "docvqa",
        "/abs/p8.png",
    )
    assert dv.task_types([a, b]) == ["cat", "docvqa"] and dv.task_types([]) == ["docvqa"]


def test_missing_images_are_one_line_naming_the_path_and_the_fix(tmp_path):
    root = tmp_path / "data"
    for s in dv.SPLITS:
        _write_csv(
            root / s / "x.csv", [{"questionId": "1", "question": "Q", "answer": "['a']", "image_path": "img/q1.png"}]
        )
    b = DocVQABenchmark({"data_dir": str(root), "options": {"target_provider": "openai"}})
    with pytest.raises(DataError) as e:
        b.load_split("selection")
    msg = str(e.value)
    assert "\n" not in msg and str(root / "img/q1.png") in msg and "materialize" in msg and "image_root" in msg
    (root / "img").mkdir()
    (root / "img" / "q1.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    assert [t.task_id for t in b.load_split("valid_unseen")] == ["1"]
    with pytest.raises(DataError, match="no such|does not exist"):
        DocVQABenchmark({"data_dir": str(tmp_path / "nowhere")})
    with pytest.raises(DataError, match="holds no \\*.csv"):
        DocVQABenchmark({"data_dir": str(tmp_path)}).load_split("train")


def test_paper_split_facts_ship_with_the_licence_notice():
    manifest = json.loads((SHIPPED / "split_manifest.json").read_text())
    assert manifest["name"] == dv.PAPER_SPLIT_NAME == "docvqa_validation_10pct"
    assert manifest["counts"] == dv.PAPER_COUNTS == {"train": 107, "val": 53, "test": 374}
    assert manifest["source_revision"] == "539088ef8a8ada01ac8e2e6d4e372586748a265e"
    notice = (SHIPPED / "NOTICE").read_text()
    assert "Apache" in notice and "MIT" in notice and "ids" in notice


def _shipped_ids(split: str) -> list[str]:
    return [it["questionId"] for it in json.loads((SHIPPED / split / "items.json").read_text())]


def test_the_paper_split_ids_ship_107_53_374_unique_and_disjoint():
    from skillopt_envs.docvqa import upstream

    manifest = json.loads((SHIPPED / "split_manifest.json").read_text())
    assert manifest["ids_included"] is True and dv.PAPER_SPLIT_DIR == SHIPPED
    ids = {s: _shipped_ids(s) for s in dv.SPLITS}
    assert {s: len(v) for s, v in ids.items()} == {"train": 107, "val": 53, "test": 374} == manifest["counts"]
    every = [q for s in dv.SPLITS for q in ids[s]]
    assert len(set(every)) == len(every) == 534  # unique within each split and disjoint across them
    for s in dv.SPLITS:
        items = json.loads((SHIPPED / s / "items.json").read_text())
        assert all(
            it["id"] == it["questionId"] and it["questionId"].isdigit() and it["docId"].isdigit() for it in items
        )
        assert all(it["topic"] and it["ucsf_document_id"] and it["ucsf_document_page_no"] for it in items)
        assert upstream.read_id_manifest(SHIPPED, s) == ids[s]  # the runner reads them in SkillOpt's order
    # SkillOpt's order, pinned at both ends of each file
    assert (ids["train"][0], ids["train"][-1]) == ("50877", "59502")
    assert (ids["val"][0], ids["val"][-1]) == ("62409", "58687")
    assert (ids["test"][0], ids["test"][-1]) == ("63180", "63537")
    notice = (SHIPPED / "NOTICE").read_text()
    assert "abe36315a419416d68bf99941ea348967103901c" in notice and "Copyright (c) 2026 Microsoft" in notice


# --- the episode ----------------------------------------------------------------------------------------------------


class FakeLLM:
    def __init__(self, *replies: str, delay: float = 0.0):
        self.replies, self.delay = list(replies), delay
        self.requests: list[ChatRequest] = []

    async def chat(self, req: ChatRequest) -> ChatResult:
        self.requests.append(req)
        if self.delay:
            await asyncio.sleep(self.delay)
        return ChatResult(self.replies[min(len(self.requests), len(self.replies)) - 1])


@pytest.fixture(scope="module")
def sample_root(tmp_path_factory) -> Path:
    return samples.ensure_samples(str(tmp_path_factory.mktemp("docvqa") / "samples"))


def _bench(sample_root: Path, **options) -> DocVQABenchmark:
    return DocVQABenchmark({"options": {"sample_dir": str(sample_root), "target_provider": "openai", **options}})


def _ctx(turns: int = 1) -> EpisodeContext:
    return EpisodeContext("rollout/e1s1", True, turns, 0)


def test_request_is_one_multimodal_message_text_then_the_page(sample_root):
    b = _bench(sample_root)
    task = b.load_split("val")[0]
    llm = FakeLLM("<answer>nothing</answer>")
    asyncio.run(b.run_episode(task, "", llm, _ctx()))
    (req,) = llm.requests
    assert req.role == "target" and req.stage == "rollout" and req.max_tokens == 16384
    system, user = req.messages
    assert system["role"] == "system" and isinstance(system["content"], str) and "## Skill" not in system["content"]
    assert user["role"] == "user" and len(user["content"]) == 2
    text, image = user["content"]
    assert text["type"] == "text" and text["text"].startswith(task.payload["question"] + "\n\n")
    assert "<answer>" in text["text"]
    assert image["type"] == "image_url" and set(image["image_url"]) == {"url"}  # no detail when auto
    prefix = "data:image/png;base64,"
    assert image["image_url"]["url"].startswith(prefix)
    raw = base64.b64decode(image["image_url"]["url"][len(prefix) :])
    assert raw == Path(task.payload["image_path"]).read_bytes()
    assert req.key == f"rollout/e1s1/{task.task_id}/t0"
    high = FakeLLM("<answer>x</answer>")
    asyncio.run(_bench(sample_root, image_detail="high").run_episode(task, "", high, _ctx()))
    assert high.requests[0].messages[1]["content"][1]["image_url"]["detail"] == "high"


def test_skill_goes_in_the_system_message_only(sample_root):
    b = _bench(sample_root)
    task = b.load_split("train")[0]
    llm = FakeLLM("<answer>x</answer>")
    asyncio.run(b.run_episode(task, "  # S\n- RULE-form: read the labels\n", llm, _ctx()))
    system = llm.requests[0].messages[0]["content"]
    assert "## Skill\n# S\n- RULE-form: read the labels\n\n" in system and "<answer>...</answer>" in system
    assert "RULE-form" not in content_text(llm.requests[0].messages[1]["content"])


def test_turn_loop_asks_again_only_without_answer_tags(sample_root):
    b = _bench(sample_root)
    task = b.load_split("train")[0]
    gold = task.payload["answers"][0]
    llm = FakeLLM("I am not sure.", "still thinking", f"<ANSWER>{gold}</ANSWER>", "never sent")
    r = asyncio.run(b.run_episode(task, "", llm, _ctx(4)))
    assert len(llm.requests) == 3 and r.n_turns == 3 and r.hard == 1.0 and r.soft == 1.0
    second, third = llm.requests[1].messages, llm.requests[2].messages
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == "I am not sure." and third[2]["content"] == "still thinking"  # only the latest reply
    assert second[:2] == llm.requests[0].messages and "<answer>" in second[3]["content"]
    assert [k.key[-2:] for k in llm.requests] == ["t0", "t1", "t2"]
    once = FakeLLM("no tags here\nmy guess")
    r1 = asyncio.run(b.run_episode(task, "", once, _ctx(1)))
    assert len(once.requests) == 1 and r1.info["predicted_answer"] == "my guess"


def test_what_the_analysts_see(sample_root):
    from skillopt_ray.prompts.render import minibatch_text

    b = _bench(sample_root)
    task = b.load_split("train")[0]
    gold = task.payload["answers"][0]
    partial = asyncio.run(b.run_episode(task, SEED_SKILL, FakeLLM(f"<answer>{gold}xx</answer>"), _ctx()))
    wrong = asyncio.run(
        b.run_episode(task, SEED_SKILL, FakeLLM("<answer>zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz</answer>"), _ctx())
    )
    assert 0 < partial.soft < 1 and partial.hard == 0 and partial.fail_reason == ""  # no reason for partial credit
    assert wrong.fail_reason == f"predicted 'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz' but expected one of {[gold]!r}"
    name = Path(task.payload["image_path"]).name
    text = minibatch_text([partial, wrong])
    assert f"Task: {task.payload['question']}" in text and f"Task type: {task.task_type}" in text
    assert text.count("Failure reason:") == 1 and "Steps: 1" in text
    assert f"[user] {task.payload['question']}\n\n" in text and f"[image] {name}" in text
    assert f"[agent] <answer>{gold}xx</answer>" in text
    assert f"[verification] [EVALUATION RESULT]\nQuestion: {task.payload['question']}\n" in text
    assert f"Gold answers: {[gold]!r}\nANLS: {partial.soft:.4f}" in text
    assert "#### Target System Prompt" in text and "#### Target User Prompt" in text
    assert "base64" not in text and "data:image" not in text and len(text) < 8000
    assert partial.info["target_user_prompt"] == f"{task.payload['question']}\n\n" + bm.prompts.ANSWER_SENTENCE


def test_item_watchdog_row(sample_root, monkeypatch):
    assert task_timeout(120) == 180 and task_timeout(0) == 60
    monkeypatch.setattr(bm, "TIMEOUT_SLACK_S", 0.05)
    b = _bench(sample_root, exec_timeout=0.05)
    task = b.load_split("train")[0]
    r = asyncio.run(b.run_episode(task, "", FakeLLM("<answer>x</answer>", delay=5), _ctx()))
    assert r.fail_reason == "task-timeout-0s" and r.hard == 0.0 and r.soft == 0.0 and r.n_turns == 0
    assert r.info["phase"] == "timeout" and r.task_description == task.payload["question"] and r.error is None


def test_a_missing_image_is_a_data_error_row(sample_root, tmp_path):
    b = _bench(sample_root)
    task = b.load_split("train")[0]
    moved = type(task)(task.task_id, task.task_type, {**task.payload, "image_path": str(tmp_path / "gone.png")})
    r = asyncio.run(b.run_episode(moved, "", FakeLLM("<answer>x</answer>"), _ctx()))
    assert r.data_error and not r.scored and "gone.png" in r.error


# --- the embedded model sees no images ------------------------------------------------------------------------------


def test_embedded_target_gets_the_text_layer_and_a_start_up_line(sample_root):
    b = DocVQABenchmark({"options": {"sample_dir": str(sample_root), "target_provider": "embedded"}})
    note = b.data_note()
    assert "\n" not in note and "sees no images" in note and "text layer" in note
    task = b.load_split("train")[0]
    llm = FakeLLM("<answer>x</answer>")
    r = asyncio.run(b.run_episode(task, "", llm, _ctx()))
    parts = llm.requests[0].messages[1]["content"]
    assert [p["type"] for p in parts] == ["text", "text"]  # no image part reaches a model without vision
    assert task.payload["answers"][0] in parts[1]["text"]
    assert r.info["page_input"] == "text" and "(sent as its text layer)" in r.trajectory[0]["content"]
    forced = _bench(sample_root, page_input="text")
    assert "page_input=text" in forced.data_note()
    assert "sees no images" not in _bench(sample_root).data_note()
    with pytest.raises(DataError, match="page_input"):
        _bench(sample_root, page_input="pixels")


# --- the built-in samples -------------------------------------------------------------------------------------------


def test_every_sample_answer_is_readable_from_its_page():
    """Each answer is on a line of the text layer, and that line's pixels on the page are exactly what drawing the
    line alone with the same font gives: the answer is visibly on the image."""
    from PIL import Image, ImageChops, ImageDraw

    layouts = set()
    for i in range(24):
        page, image = samples.make_page(i)
        layouts.add(page.layout)
        assert page.question and page.answer and page.answer in page.text_layer
        line = next(ln for ln in page.lines if page.answer in ln.text)
        left, top, right, bottom = line.box
        assert 0 <= left < right <= image.width and 0 <= top < bottom <= image.height
        alone = Image.new("L", image.size, 255)
        ImageDraw.Draw(alone).text(line.origin, line.text, fill=0, font=samples.load_font(line.size))
        crop = image.crop(line.box)
        assert ImageChops.difference(crop, alone.crop(line.box)).getbbox() is None
        assert crop.getextrema()[0] < 100  # dark text on the page
        others = [ln for ln in page.lines if ln is not line]
        assert not any(  # no other line overlaps it
            o.box[0] < right and left < o.box[2] and o.box[1] < bottom and top < o.box[3] for o in others
        )
    assert layouts == {"form", "table", "letter"}
    assert samples.font_path() and samples.font_path().endswith("DejaVuSans.ttf")


def test_samples_are_real_pngs_in_the_reference_csv_format(sample_root):
    from PIL import Image

    b = _bench(sample_root)
    tasks = [t for s in ("train", "val", "test") for t in b.load_split(s)]
    assert len(tasks) == sum(samples.SPLIT_SIZES.values()) and len({t.task_id for t in tasks}) == len(tasks)
    assert {t.task_type for t in tasks} == {"form", "table/list", "layout"}
    for t in tasks:
        with Image.open(t.payload["image_path"]) as im:
            assert im.format == "PNG" and im.size == samples.PAGE_SIZE
        layer = dv.text_layer_path(t.payload["image_path"]).read_text()
        assert t.payload["answers"][0] in layer
    assert (sample_root / "train" / "train.csv").read_text().startswith("questionId,question,answer,image_path,topic")
    import pickle

    # tasks carry paths, not pages: what the driver holds and ships to env actors stays small
    assert set(tasks[0].payload) == {"question", "answers", "image_path", "docId"}
    assert len(pickle.dumps(tasks)) < 300 * len(tasks)
    assert "built-in sample pages" in b.data_note()


# --- the LLM layer carries content parts ---------------------------------------------------------------------------


def test_prompt_size_counts_text_parts_and_images():
    req = ChatRequest(
        "target",
        "rollout",
        [
            {"role": "system", "content": "abcd"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "xy"},
                    {"type": "image_url", "image_url": {"url": "data:" + "A" * 10**6}},
                ],
            },
        ],
    )
    from skillopt_envs.chat import IMAGE_PART_CHARS

    assert req.prompt_chars() == 4 + 2 + 1 + IMAGE_PART_CHARS  # the data URL's length does not count
    assert content_text(req.messages[1]["content"]) == "xy\n[image]"


def test_episode_over_real_http_with_reasoning_model_parameters(sample_root):
    """The paper's target settings (max_completion_tokens, no temperature) against a server that answers as a
    reasoning model: the request carries the image as the second part and the reply is scored."""
    from scripted_server import ScriptedServer

    from skillopt_ray.config import LLMConfig, LLMRoleConfig
    from skillopt_ray.llm.gateway import Gateway, LLMHandle

    b = _bench(sample_root)
    task = b.load_split("test")[0]
    gold = task.payload["answers"][0]
    with ScriptedServer(policy=lambda body, headers: f"Looking.\n<answer>{gold}</answer>", reasoning_model=True) as srv:
        r = LLMRoleConfig(provider="openai", model="m", base_url=srv.base_url, timeout_s=5, max_completion_tokens=16384)
        gw = Gateway(LLMConfig(backend="compatible", target=r, optimizer=LLMRoleConfig(**vars(r))), None)
        loop = asyncio.new_event_loop()
        try:
            res = loop.run_until_complete(b.run_episode(task, SEED_SKILL, LLMHandle(gw), _ctx()))
            loop.run_until_complete(gw.close())
        finally:
            loop.close()
        body = srv.state.bodies[-1]
    assert res.hard == 1.0 and res.info["predicted_answer"] == gold
    assert body["max_completion_tokens"] == 16384 and "temperature" not in body and "max_tokens" not in body
    parts = body["messages"][1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"] and parts[1]["image_url"]["url"].startswith(
        "data:image/png;base64,"
    )


def test_a_target_that_rejects_images_is_one_clear_line(sample_root):
    """A remote target without vision answers 400: the run stops with one line naming the fix, not a score."""
    import threading

    from aiohttp import web

    from skillopt_ray.config import LLMConfig, LLMRoleConfig
    from skillopt_ray.llm.gateway import Gateway, LLMHandle
    from skillopt_ray.llm.types import LLMRequestRejected

    async def chat(request):
        return web.json_response({"error": {"message": "image input is not supported by this model"}}, status=400)

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        b = _bench(sample_root)
        task = b.load_split("test")[0]
        r = LLMRoleConfig(provider="openai", model="text-only", base_url=f"http://127.0.0.1:{port}/v1", timeout_s=5)
        gw = Gateway(LLMConfig(backend="compatible", target=r, optimizer=LLMRoleConfig(**vars(r))), None)
        mine = asyncio.new_event_loop()
        with pytest.raises(LLMRequestRejected) as e:
            mine.run_until_complete(b.run_episode(task, "", LLMHandle(gw), _ctx()))
        mine.run_until_complete(gw.close())
        mine.close()
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    msg = str(e.value)
    assert "\n" not in msg and "rejects image input" in msg and "env.options.page_input=text" in msg
    assert "image input is not supported" in msg


# --- materialisation from the public data's formats ----------------------------------------------------------------


def _manifest(root: Path, ids: dict[str, list[str]]) -> Path:
    for split, qs in ids.items():
        (root / split).mkdir(parents=True)
        (root / split / "items.json").write_text(json.dumps([{"id": q, "questionId": q} for q in qs]))
    return root


def test_materialize_from_parquet_writes_images_and_reference_csvs(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from skillopt_envs.docvqa.materialize import main

    recs = []
    for i in range(5):
        page, image = samples.make_page(i)
        path = tmp_path / f"p{i}.png"
        image.save(path)
        recs.append(
            {
                "questionId": str(300 + i),
                "question": page.question,
                "question_types": ["handwritten", "form"] if i == 0 else ["table/list"],
                "image": {"bytes": path.read_bytes(), "path": None},
                "docId": 50 + i,
                "ucsf_document_id": f"u{i}",
                "ucsf_document_page_no": "1",
                "answers": [page.answer, page.answer.upper()],
                "data_split": "validation",
            }
        )
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "validation-00000-of-00001.parquet", row_group_size=2)
    manifest = _manifest(tmp_path / "ids", {"train": ["302", "300"], "val": ["301"], "test": ["304"]})
    out = tmp_path / "out"
    assert (
        main(
            [
                "--source",
                str(tmp_path / "validation-00000-of-00001.parquet"),
                "--manifest",
                str(manifest),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    b = DocVQABenchmark({"data_dir": str(out), "options": {"target_provider": "openai"}})
    train = b.load_split("train")
    assert [t.task_id for t in train] == ["302", "300"]  # manifest order; 303 is in no split
    assert train[1].task_type == "handwritten|form"
    assert train[1].payload["answers"] == [recs[0]["answers"][0], recs[0]["answers"][1]]
    assert Path(train[1].payload["image_path"]).name == "q300_d50.png"
    assert Path(train[1].payload["image_path"]).read_bytes() == recs[0]["image"]["bytes"]
    assert "1/1" in b.data_note() and "107/53/374" in b.data_note()
    missing = _manifest(tmp_path / "ids2", {"train": ["999"], "val": [], "test": []})
    assert (
        main(
            [
                "--source",
                str(tmp_path / "validation-00000-of-00001.parquet"),
                "--manifest",
                str(missing),
                "--out",
                str(tmp_path / "o2"),
            ]
        )
        == 2
    )


def test_materialize_from_the_original_json_with_ocr(tmp_path):
    from skillopt_envs.docvqa.materialize import materialize

    src = tmp_path / "docvqa"
    (src / "documents").mkdir(parents=True)
    (src / "ocr").mkdir()
    page, image = samples.make_page(1)
    image.save(src / "documents" / "abc_1.png")
    (src / "ocr" / "abc_1.json").write_text(
        json.dumps({"recognitionResults": [{"lines": [{"text": ln.text} for ln in page.lines]}]})
    )
    rec = {
        "questionId": 41,
        "question": page.question,
        "question_types": ["table/list"],
        "image": "documents/abc_1.png",
        "docId": 9,
        "answers": [page.answer],
        "data_split": "val",
    }
    (src / "val_v1.0.json").write_text(json.dumps({"dataset_split": "val", "data": [rec]}))
    counts = materialize(
        [src / "val_v1.0.json"], _manifest(tmp_path / "ids", {"train": [], "val": [], "test": ["41"]}), tmp_path / "out"
    )
    assert counts == {"train": 0, "val": 0, "test": 1}
    (item,) = dv.load_split_items(tmp_path / "out", "test", tmp_path / "out")
    assert item["answers"] == [page.answer] and page.answer in dv.text_layer_path(item["image_path"]).read_text()
    (src / "documents" / "abc_1.png").unlink()
    with pytest.raises(DataError, match="abc_1.png of question 41 is missing"):
        materialize([src / "val_v1.0.json"], tmp_path / "ids", tmp_path / "out2")


# --- content parts through the cache, the length guard and the presets ---------------------------------------------


def test_response_cache_keys_multimodal_requests_by_their_image(sample_root, tmp_path):
    """The same request is replayed from the cache; the same text with another page is a new call."""
    from scripted_server import ScriptedServer

    from skillopt_ray.config import LLMConfig, LLMRoleConfig
    from skillopt_ray.llm.gateway import Gateway, LLMHandle

    b = _bench(sample_root)
    first, second = b.load_split("test")[:2]
    ctx = EpisodeContext("eval/test", False, 1, 0)
    with ScriptedServer(policy=lambda body, headers: "<answer>x</answer>") as srv:
        r = LLMRoleConfig(provider="openai", model="m", base_url=srv.base_url, timeout_s=5)
        gw = Gateway(LLMConfig(backend="compatible", target=r, optimizer=r), str(tmp_path / "cache.sqlite"))
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(b.run_episode(first, "", LLMHandle(gw), ctx))
            loop.run_until_complete(b.run_episode(first, "", LLMHandle(gw), ctx))  # the same request: replayed
            moved = type(second)(
                first.task_id, first.task_type, {**first.payload, "image_path": second.payload["image_path"]}
            )
            loop.run_until_complete(b.run_episode(moved, "", LLMHandle(gw), ctx))  # same key and text, other page
            totals = gw.ledger.totals()
            loop.run_until_complete(gw.close())
        finally:
            loop.close()
        assert srv.state.attempts == 2
    assert (totals["calls"], totals["cache_hits"]) == (2, 1)  # the ledger counts both calls and the replay


def test_length_guard_shows_content_parts_as_text_never_base64():
    from skillopt_envs.base import EpisodeResult

    from skillopt_ray.prompts.length_guard import shrink_result

    url = "data:image/png;base64," + "QUJD" * 5000
    parts = [{"type": "text", "text": "What is shown?"}, {"type": "image_url", "image_url": {"url": url}}]
    r = EpisodeResult("1", "form", trajectory=[{"role": "user", "content": parts}, {"type": "message", "content": "a"}])
    cut = shrink_result(r, 4000)
    assert cut.trajectory[0]["content"] == "What is shown?\n[image]" and "base64" not in json.dumps(cut.trajectory)


@pytest.mark.parametrize("llm,provider,sends", [("paper", "openai", True), ("embedded", "embedded", False)])
def test_presets_pick_the_page_input_and_the_paper_parameters(llm, provider, sends):
    from skillopt_ray import cli
    from skillopt_ray.config import LLMRoleConfig
    from skillopt_ray.llm.client import RoleEndpoint

    data = cli.plain(cli.compose(["+experiment=docvqa", f"llm={llm}"]))
    opts = bm.DocVQAOptions.parse(data["env"]["options"])
    assert data["env"]["name"] == "docvqa" and data["env"]["max_turns"] == 1
    assert opts.target_provider == provider and opts.sends_images is sends and opts.image_detail == "auto"
    assert opts.max_completion_tokens == 16384 and task_timeout(opts.exec_timeout) == 180
    if llm == "paper":
        role = LLMRoleConfig(
            **{k: v for k, v in data["llm"]["target"].items() if k != "base_url"}, base_url="http://x/v1"
        )
        kw = RoleEndpoint.request_kwargs(
            type("E", (), {"cfg": role, "completion_budget": lambda self, req: role.reply_budget(req.max_tokens)})(),
            ChatRequest("target", "rollout", [], max_tokens=opts.max_completion_tokens),
        )
        assert kw["max_completion_tokens"] == 16384 and kw["reasoning_effort"] == "medium"
        assert "temperature" not in kw and "max_tokens" not in kw


def test_docvqa_analyst_prompts_name_the_reference_categories():
    from skillopt_ray import prompts

    error = prompts.system_prompt("analyst_error", "docvqa")
    for category in ("evidence_miss", "near_match_confusion", "normalization_error", "reading_error", "other"):
        assert f"`{category}`" in error
    assert '"failure_summary"' in error and '"edits"' in error and "never see the image" in error
    success = prompts.system_prompt("analyst_success", "docvqa")
    assert '"success_patterns"' in success and "exact span" in success
    assert error != prompts.system_prompt("analyst_error", "searchqa")


# --- the public data read in place ----------------------------------------------------------------------------------


def _parquet_data(tmp_path: Path, n: int = 5) -> tuple[Path, list[dict]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = []
    for i in range(n):
        page, image = samples.make_page(i)
        path = tmp_path / f"src{i}.png"
        image.save(path)
        recs.append(
            {
                "questionId": str(500 + i),
                "question": page.question,
                "question_types": ["form"] if i % 2 else ["table/list", "layout"],
                "image": {"bytes": path.read_bytes(), "path": None},
                "docId": 70 + i,
                "answers": [page.answer],
                "data_split": "validation",
            }
        )
    root = tmp_path / "lmms-docvqa"
    (root / "DocVQA").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(recs), root / "DocVQA" / "validation-00000-of-00001.parquet", row_group_size=2)
    return root, recs


def test_parquet_read_in_place_pages_written_out_by_the_episode(tmp_path, monkeypatch):
    import pickle

    from skillopt_envs.docvqa import upstream

    monkeypatch.setattr(upstream, "PAGE_CACHE", tmp_path / "page-cache")
    root, recs = _parquet_data(tmp_path)
    ids = _manifest(tmp_path / "ids", {"train": ["503", "500"], "val": ["501"], "test": ["504"]})
    b = DocVQABenchmark({"data_dir": str(root), "manifest_dir": str(ids), "options": {"target_provider": "openai"}})
    assert "1 parquet file" in b.data_note() and str(ids) in b.data_note() and "2/1/1 train/val/test" in b.data_note()
    train = b.load_split("train")
    assert [t.task_id for t in train] == ["503", "500"] and train[1].task_type == "table/list|layout"
    assert train[1].payload["page_source"]["row_group"] == 0 and train[0].payload["page_source"]["row_group"] == 1
    assert len(pickle.dumps(train)) < 2000  # no page bytes in the tasks
    assert not (tmp_path / "page-cache").exists()  # nothing written out before an episode needs it
    llm = FakeLLM(f"<answer>{recs[0]['answers'][0]}</answer>")
    r = asyncio.run(b.run_episode(train[1], "", llm, _ctx()))
    url = llm.requests[0].messages[1]["content"][1]["image_url"]["url"]
    assert base64.b64decode(url.split(",", 1)[1]) == recs[0]["image"]["bytes"] and r.hard == 1.0
    assert "[image] q500_d70.png" in r.trajectory[0]["content"]
    written = sorted(p.name for p in (tmp_path / "page-cache").rglob("q*.png"))
    assert written == ["q500_d70.png", "q501_d71.png"]  # the episode's row group, once
    with pytest.raises(DataError, match="not in"):
        bad = _manifest(tmp_path / "ids-bad", {"train": ["999"], "val": [], "test": []})
        DocVQABenchmark({"data_dir": str(root), "manifest_dir": str(bad)}).load_split("train")


def test_original_json_read_in_place_with_its_ocr_as_the_text_layer(tmp_path):
    src = tmp_path / "docvqa"
    (src / "documents").mkdir(parents=True)
    (src / "ocr").mkdir()
    page, image = samples.make_page(2)
    image.save(src / "documents" / "xyz_1.png")
    lines = [{"text": ln.text} for ln in page.lines]
    (src / "ocr" / "xyz_1.json").write_text(json.dumps({"recognitionResults": [{"lines": lines}]}))
    rec = {"questionId": 8, "question": page.question, "question_types": ["layout"], "image": "documents/xyz_1.png"}
    (src / "val_v1.0.json").write_text(
        json.dumps({"dataset_split": "val", "data": [{**rec, "answers": [page.answer]}]})
    )
    ids = _manifest(tmp_path / "ids", {"train": [], "val": [], "test": ["8"]})
    cfg = {"data_dir": str(src), "manifest_dir": str(ids)}
    (task,) = DocVQABenchmark({**cfg, "options": {"target_provider": "embedded"}}).load_split("test")
    llm = FakeLLM("<answer>x</answer>")
    asyncio.run(DocVQABenchmark({**cfg, "options": {"target_provider": "embedded"}}).run_episode(task, "", llm, _ctx()))
    assert page.answer in llm.requests[0].messages[1]["content"][1]["text"]  # the OCR lines stand in for the image
    image_llm = FakeLLM("<answer>x</answer>")
    asyncio.run(
        DocVQABenchmark({**cfg, "options": {"target_provider": "openai"}}).run_episode(task, "", image_llm, _ctx())
    )
    url = image_llm.requests[0].messages[1]["content"][1]["image_url"]["url"]
    assert base64.b64decode(url.split(",", 1)[1]) == (src / "documents" / "xyz_1.png").read_bytes()


def _json_pool(root: Path, ids: list[str]) -> Path:
    """The original DocVQA JSON layout holding the given question ids, every one on the same small page."""
    (root / "documents").mkdir(parents=True)
    page, image = samples.make_page(0)
    image.save(root / "documents" / "page.png")
    recs = [
        {
            "questionId": int(q),
            "question": f"q{q}?",
            "question_types": ["form"],
            "image": "documents/page.png",
            "docId": 9,
            "answers": [f"a{q}"],
        }
        for q in ids
    ]
    (root / "val_v1.0.json").write_text(json.dumps({"dataset_split": "val", "data": recs}))
    return root


def test_public_data_without_manifest_dir_is_split_by_the_shipped_paper_ids(tmp_path):
    every = [q for s in dv.SPLITS for q in _shipped_ids(s)]
    root = _json_pool(tmp_path / "docvqa", ["7", *reversed(every), "8"])  # extra questions and another order
    b = DocVQABenchmark({"data_dir": str(root), "options": {"target_provider": "openai"}})
    note = b.data_note()
    assert "107/53/374 train/val/test" in note and "as in the paper's split" in note and "paper's ids" in note
    for s in dv.SPLITS:
        assert [t.task_id for t in b.load_split(s)] == _shipped_ids(s)
    task = b.load_split("valid_unseen")[0]
    assert task.task_id == "63180" and task.payload["answers"] == ["a63180"]
    llm = FakeLLM("<answer>a63180</answer>")
    r = asyncio.run(b.run_episode(task, "", llm, _ctx()))
    url = llm.requests[0].messages[1]["content"][1]["image_url"]["url"]
    assert base64.b64decode(url.split(",", 1)[1]) == (root / "documents" / "page.png").read_bytes() and r.hard == 1.0
    # env.manifest_dir still overrides the shipped split
    ids = _manifest(tmp_path / "ids", {"train": ["8"], "val": ["7"], "test": ["50877"]})
    other = DocVQABenchmark({"data_dir": str(root), "manifest_dir": str(ids), "options": {"target_provider": "openai"}})
    assert [t.task_id for t in other.load_split("train")] == ["8"] and "1/1/1 train/val/test" in other.data_note()


def test_public_data_missing_shipped_ids_is_one_line_naming_the_fix(tmp_path):
    train = _shipped_ids("train")
    root, _ = _parquet_data(tmp_path)  # questions 500-504, none of the paper's
    import pyarrow as pa
    import pyarrow.parquet as pq

    # a pool holding only the first three of the paper's train ids
    rows = pq.read_table(root / "DocVQA" / "validation-00000-of-00001.parquet").to_pylist()[:3]
    for row, q in zip(rows, train[:3]):
        row["questionId"] = q
    pq.write_table(pa.Table.from_pylist(rows), root / "DocVQA" / "validation-00000-of-00001.parquet")
    b = DocVQABenchmark(
        {"data_dir": str(root), "options": {"target_provider": "openai"}}
    )  # no manifest_dir: no error yet
    with pytest.raises(DataError) as e:
        b.load_split("train")
    msg = str(e.value)
    assert "\n" not in msg and f"104 of 107 question ids of the train split in {SHIPPED}" in msg
    assert "the paper's split" in msg and f"(first: {train[3]})" in msg and "env.manifest_dir" in msg


def test_materialize_defaults_to_the_shipped_paper_split(tmp_path):
    import csv as _csv

    from skillopt_envs.docvqa import materialize

    every = [q for s in dv.SPLITS for q in _shipped_ids(s)]
    root = _json_pool(tmp_path / "docvqa", sorted(every))
    out = tmp_path / "out"
    assert materialize.main(["--source", str(root / "val_v1.0.json"), "--out", str(out)]) == 0
    for s in dv.SPLITS:
        with (out / s / f"{s}.csv").open(newline="", encoding="utf-8") as f:
            assert [r["questionId"] for r in _csv.DictReader(f)] == _shipped_ids(s)
    assert len(list((out / "images").iterdir())) == 534


def test_manifest_dir_picks_ids_from_csv_folders_too(sample_root, tmp_path):
    pool = {t.task_id: t for s in ("train", "val", "test") for t in _bench(sample_root).load_split(s)}
    some = sorted(pool)[:3]
    ids = _manifest(tmp_path / "ids", {"train": [some[2], some[0]], "val": [some[1]], "test": [some[1]]})
    b = DocVQABenchmark(
        {"manifest_dir": str(ids), "options": {"sample_dir": str(sample_root), "target_provider": "openai"}}
    )
    assert [t.task_id for t in b.load_split("train")] == [some[2], some[0]]
    assert b.load_split("test")[0].payload == pool[some[1]].payload
