"""`+experiment=docvqa` end to end through the driver on the built-in sample pages, with a rule-gated scripted
target: it answers right only once the optimizer has written the rule for the question's type into the skill.
The target's requests carry each page as the second content part of the user message."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from helpers import checked
from scripted_server import Policies, ScriptedServer
from skillopt_envs.docvqa import data as dv
from skillopt_envs.docvqa.samples import ensure_samples

from skillopt_ray import cli

pytestmark = pytest.mark.slow


def test_docvqa_experiment_learns_and_sends_the_page_image(ray_cluster, tmp_path):
    root = ensure_samples(str(tmp_path / "samples"))
    answers, images = {}, {}
    for split in dv.SPLITS:
        for it in dv.load_split_items(root, split, root):
            answers[it["id"]] = (it["task_type"], f"<answer>{it['answers'][0]}</answer>", "<answer>unknown</answer>")
            images.setdefault(it["question"], set()).add(Path(it["image_path"]).read_bytes())
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        overrides = [
            "+experiment=docvqa",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "debug.progress=off",
            f"env.options.sample_dir={root}",
            # three train pages (a form, a table, a letter) in one minibatch, so one analyst call sees every type
            "env.limit_train=3",
            "optimizer.batch_size=3",
            "optimizer.minibatch_size=3",
            "env.limit_selection=2",
            "env.limit_test=4",
        ]
        data = cli.plain(cli.compose(overrides))
        data = cli.resolve_paths(data)
        code = cli.run_one(checked(data))
        rd = cli.run_dir_for(data)
        targets = [
            b for b in srv.state.bodies if len(b["messages"]) >= 2 and isinstance(b["messages"][1]["content"], list)
        ]
    assert code == 0
    assert targets, "no target request reached the server"
    for body in targets:
        text, image = body["messages"][1]["content"]
        assert text["type"] == "text" and image["type"] == "image_url"
        url = image["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        question = text["text"].split("\n\n")[0]
        assert base64.b64decode(url.split(",", 1)[1]) in images[question]  # a page this question is asked of
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["test"]["initial"]["hard"] < 1.0 and summary["test"]["best"]["hard"] == 1.0, summary["test"]
    assert summary["counts"]["accept"] >= 1 and "RULE-" in (rd / "best_skill.md").read_text()
    step = rd / "steps" / "e01_s001"
    gate = [p.name for p in step.iterdir()]
    assert any("gate" in n for n in gate), gate  # the first training step reached the validation gate
    analyst_prompts = (rd / "steps").rglob("*.json")
    assert not any("base64," in p.read_text(errors="ignore") for p in analyst_prompts)  # no image in run records


def test_embedded_server_reads_text_parts_and_refuses_images_in_one_line(tmp_path):
    """The real llama.cpp server: the text-layer request (two text parts) is answered; an image part is refused
    (HTTP 500 there), which stops the episode at once with the line naming env.options.page_input=text."""
    import asyncio

    from skillopt_envs.base import EpisodeContext
    from skillopt_envs.docvqa.benchmark import DocVQABenchmark

    from skillopt_ray.config import LLMConfig, LLMRoleConfig
    from skillopt_ray.llm.embedded import EmbeddedServer
    from skillopt_ray.llm.gateway import Gateway, LLMHandle
    from skillopt_ray.llm.types import LLMRequestRejected

    root = ensure_samples(str(tmp_path / "samples"))
    srv = EmbeddedServer(ctx_size=2048, threads=1, parallel=1, log_path=tmp_path / "server.log")
    url = srv.start()
    loop = asyncio.new_event_loop()
    try:
        # the plumbing is under test, not the tiny model's stopping: a reply that runs on (SmolLM2 once wrote to the
        # 32,768-token limit here) ends at 32 tokens and is kept, not retried or raised
        role = LLMRoleConfig(
            provider="embedded", model="smollm2-135m", base_url=url, max_tokens=16, max_reply_tokens=32, timeout_s=60
        )
        gw = Gateway(
            LLMConfig(backend="embedded", target=role, optimizer=role, max_retries=3, truncated_reply="keep"), None
        )
        ctx = EpisodeContext("k", False, 1, 0)
        text = DocVQABenchmark({"options": {"sample_dir": str(root), "target_provider": "embedded"}})
        task = text.load_split("test")[0]
        r = loop.run_until_complete(text.run_episode(task, "", LLMHandle(gw), ctx))
        assert r.n_turns == 1 and r.error is None and r.trajectory[1]["content"].strip()
        image = DocVQABenchmark(
            {"options": {"sample_dir": str(root), "target_provider": "embedded", "page_input": "image"}}
        )
        with pytest.raises(LLMRequestRejected) as e:
            loop.run_until_complete(image.run_episode(task, "", LLMHandle(gw), ctx))
        assert gw.endpoints["target"].retries_done == 0  # refused at once, not retried
        loop.run_until_complete(gw.close())
    finally:
        loop.close()
        srv.stop()
    msg = str(e.value)
    assert "\n" not in msg and "rejects image input (HTTP 500)" in msg and "env.options.page_input=text" in msg


def test_parquet_data_in_place_pages_read_by_the_env_actors(ray_cluster, tmp_path):
    """The lmms-lab parquet files as env.data_dir with an id manifest: the CLI plans the splits from the questions
    alone, and the env actors write the pages they need into env.options.page_cache and send them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from skillopt_envs.docvqa.samples import make_page

    recs, answers = [], {}
    for i in range(12):
        page, image = make_page(i)
        path = tmp_path / f"p{i}.png"
        image.save(path)
        qid = str(600 + i)
        recs.append(
            {
                "questionId": qid,
                "question": page.question,
                "question_types": [page.topic],
                "image": {"bytes": path.read_bytes(), "path": None},
                "docId": i,
                "answers": [page.answer],
            }
        )
        answers[qid] = (page.topic, f"<answer>{page.answer}</answer>", "<answer>unknown</answer>")
    data = tmp_path / "DocVQA"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist(recs), data / "validation-00000-of-00001.parquet", row_group_size=4)
    ids = tmp_path / "ids"
    for split, qs in {"train": range(600, 606), "val": range(606, 609), "test": range(609, 612)}.items():
        (ids / split).mkdir(parents=True)
        (ids / split / "items.json").write_text(json.dumps([{"id": str(q)} for q in qs]))
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        overrides = [
            "+experiment=docvqa",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "debug.progress=off",
            f"env.data_dir={data}",
            f"env.manifest_dir={ids}",
            f"env.options.page_cache={tmp_path / 'pages'}",
            "optimizer.epochs=1",
        ]
        cfg = cli.plain(cli.compose(overrides))
        cfg = cli.resolve_paths(cfg)
        code = cli.run_one(checked(cfg))
        rd = cli.run_dir_for(cfg)
        sent = [
            base64.b64decode(b["messages"][1]["content"][1]["image_url"]["url"].split(",", 1)[1])
            for b in srv.state.bodies
            if len(b["messages"]) >= 2 and isinstance(b["messages"][1]["content"], list)
        ]
    assert code == 0
    pages = {r["image"]["bytes"] for r in recs}
    assert sent and all(s in pages for s in sent)
    written = list((tmp_path / "pages").rglob("q*.png"))
    assert written and all(p.read_bytes() in pages for p in written)
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["test"]["best"]["hard"] >= summary["test"]["initial"]["hard"]
