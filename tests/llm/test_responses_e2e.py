"""Whole `+smoke=tiny` trainings with both roles on the Responses API (llm.<role>.api=responses) against the scripted
server's POST /v1/responses: SearchQA (its ledger and cache the same shape as a chat run's, and a replay run that
makes no call) and OfficeQA (the tool loop through function_call items); and, on Chat Completions, every reply the
endpoint answered and billed is in the ledger, the ones cut at the completion limit and the filtered ones included."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import qa_fixture
from helpers import checked
from officeqa_helpers import tool_agent
from scripted_server import Fault, Policies, ScriptedServer
from skillopt_envs.officeqa.benchmark import OfficeQABenchmark

from skillopt_ray import cli

pytestmark = pytest.mark.slow

RESPONSES = ["llm.target.api=responses", "llm.optimizer.api=responses"]


def _run(url: str, out: Path, *extra: str) -> tuple[int, Path]:
    overrides = [
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        "debug.progress=off",
        "llm.retry_base_s=0.05",
        "llm.retry_max_s=0.2",
        *extra,
    ]
    data = cli.plain(cli.compose(overrides))
    data = cli.resolve_paths(data)
    return cli.run_one(checked(data)), cli.run_dir_for(data)


def _searchqa(url: str, out: Path, data: Path, *extra: str) -> tuple[int, Path]:
    return _run(url, out, "+experiment=searchqa", f"env.data_dir={data}", "env.options.split_source=folders", *extra)


def _ledger_shape(rd: Path) -> dict:
    """Per role/stage: the entry's fields and its call count."""
    ledger = json.loads((rd / "ledger.json").read_text())
    return {k: (sorted(v), v["calls"]) for k, v in ledger["entries"].items()}


def _cache_shape(rd: Path) -> list:
    """Per recorded reply, in stage order: its stage and the fields it holds."""
    with sqlite3.connect(rd / "llm_cache.sqlite") as db:
        rows = db.execute("SELECT stage, response FROM responses").fetchall()
    return sorted((stage, tuple(sorted(json.loads(resp)))) for stage, resp in rows)


def test_searchqa_trains_on_the_responses_api_like_on_chat_and_replays_offline(ray_cluster, tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        code, chat = _searchqa(srv.base_url, tmp_path / "chat", tmp_path / "qa")
        assert code == 0
        chat_paths = set(srv.state.paths)
        srv.state.paths.clear()
        code, rd = _searchqa(srv.base_url, tmp_path / "responses", tmp_path / "qa", *RESPONSES)
        assert code == 0
        assert chat_paths == {"/v1/chat/completions"} and set(srv.state.paths) == {"/v1/responses"}
        assert _ledger_shape(rd) == _ledger_shape(chat)
        assert _cache_shape(rd) == _cache_shape(chat)
        summary, chat_summary = (json.loads((d / "summary.json").read_text()) for d in (rd, chat))
        assert summary["test"] == chat_summary["test"] and summary["counts"] == chat_summary["counts"]
        _wipe_all_but_the_cache(rd)  # the same run again from its cache alone
        attempts = srv.state.attempts
        code, again = _searchqa(
            srv.base_url, tmp_path / "responses", tmp_path / "qa", *RESPONSES, "llm.cache_mode=replay"
        )
        assert code == 0 and again == rd and srv.state.attempts == attempts  # no call
    assert json.loads((rd / "ledger.json").read_text())["totals"]["calls"] == 0
    assert json.loads((rd / "summary.json").read_text())["test"] == summary["test"]


def _officeqa(url: str, out: Path, sample: str, *extra: str) -> tuple[int, Path]:
    return _run(
        url,
        out,
        "+experiment=officeqa",
        f"env.options.sample_dir={sample}",
        "env.max_turns=6",
        "env.limit_train=2",
        "env.limit_selection=4",
        "env.limit_test=4",
        *extra,
    )


def _wipe_all_but_the_cache(rd: Path) -> None:
    import shutil

    for p in rd.iterdir():
        if not p.name.startswith("llm_cache"):
            p.unlink() if p.is_file() else shutil.rmtree(p)


def test_officeqa_tool_loop_runs_on_the_responses_api_like_on_chat(ray_cluster, tmp_path):
    sample = str(tmp_path / "samples")
    bench = OfficeQABenchmark({"options": {"sample_dir": sample}})
    types = {t.task_id: t.task_type for s in ("train", "val", "test") for t in bench.load_split(s)}
    with ScriptedServer(policy=tool_agent(types, Policies(target="rule_gated"))) as srv:
        code, chat = _officeqa(srv.base_url, tmp_path / "chat", sample)
        assert code == 0
        srv.state.bodies.clear()
        code, rd = _officeqa(srv.base_url, tmp_path / "responses", sample, *RESPONSES)
        bodies = list(srv.state.bodies)
        assert code == 0 and bodies and all("input" in b and "messages" not in b for b in bodies)
        targets = [b for b in bodies if b.get("tools")]
        assert targets and all(t["strict"] is False and "function" not in t for b in targets for t in b["tools"])
        items = [it.get("type") for b in targets for it in b["input"]]
        assert "function_call" in items and "function_call_output" in items  # the tools' results went back
        assert _ledger_shape(rd) == _ledger_shape(chat) and _cache_shape(rd) == _cache_shape(chat)
        summary = json.loads((rd / "summary.json").read_text())
        assert summary["test"]["initial"]["hard"] < summary["test"]["best"]["hard"], summary["test"]
        with sqlite3.connect(rd / "llm_cache.sqlite") as db:
            replies = [json.loads(r) for (r,) in db.execute("SELECT response FROM responses WHERE stage='rollout'")]
        calls = [c for r in replies for c in r.get("tool_calls", [])]
        assert calls and all(c["type"] == "function" and c["function"]["name"] in ("grep", "read") for c in calls)
        _wipe_all_but_the_cache(rd)
        attempts = srv.state.attempts
        code, again = _officeqa(srv.base_url, tmp_path / "responses", sample, *RESPONSES, "llm.cache_mode=replay")
        assert code == 0 and again == rd and srv.state.attempts == attempts  # no call
    assert json.loads((rd / "summary.json").read_text())["test"] == summary["test"]


def test_every_billed_reply_is_in_the_ledger_cut_and_filtered_ones_included(ray_cluster, tmp_path):
    """Target replies cut at the completion limit (retried with twice the budget, or an llm_truncated infra error
    once the retry is cut too) and stopped by the content filter: each was answered with usage, so each is billed,
    and the ledger's tokens are the server's to the token."""
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        srv.inject(
            Fault(200, finish_reason="length"),
            Fault(200, finish_reason="length"),
            Fault(200, finish_reason="length"),
            Fault(200, finish_reason="content_filter"),
            Fault(200, finish_reason="length"),
        )
        code, rd = _searchqa(srv.base_url, tmp_path / "out", tmp_path / "qa")
        assert code == 0 and not srv.state.faults
        answered = sum(srv.state.requests.values())
        billed = (srv.state.prompt_tokens, srv.state.completion_tokens)
    t = json.loads((rd / "ledger.json").read_text())["totals"]
    assert (t["truncated"], t["filtered"]) == (4, 1)
    assert t["calls"] == answered and (t["prompt_tokens"], t["completion_tokens"]) == billed
