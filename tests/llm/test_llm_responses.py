"""The Responses API for chat roles (llm.<role>.api=auto|chat|responses): one test per capability, through the real
openai SDK (`client.responses.create`) against the scripted server's POST /v1/responses, and the same gateway as
chat (cache and replay, ledger, retries, the completion-limit retry)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from scripted_server import Fault, ScriptedServer
from skillopt_envs.chat import ChatRequest

from skillopt_ray import cli
from skillopt_ray.config import BudgetConfig, ConfigError, LLMConfig, LLMRoleConfig, PriceConfig
from skillopt_ray.config.routing import listed_for_responses, resolved_api
from skillopt_ray.llm.gateway import Gateway
from skillopt_ray.llm.types import BudgetExceeded, CacheMiss, LLMUnavailable, ReplyFiltered, ReplyTruncated


def _answer(body, headers):
    """The echo policy: the last user text back as JSON (the scripted server hands it chat-shaped messages)."""
    last = body["messages"][-1]["content"]
    text = last if isinstance(last, str) else " ".join(p.get("text", "") for p in last if p["type"] == "text")
    return json.dumps({"answer": text})


@pytest.fixture()
def srv():
    with ScriptedServer(policy=_answer) as s:
        yield s


def role(url: str, **kw) -> LLMRoleConfig:
    base = dict(provider="openai", model="gpt-5.3-codex", base_url=url, timeout_s=5.0, max_tokens=64)
    base.update(kw)
    return LLMRoleConfig(**base)


def gateway(url: str, cache=None, **kw) -> Gateway:
    r = role(url, **kw.pop("role", {}))
    cfg = LLMConfig(
        backend="compatible",
        target=r,
        optimizer=LLMRoleConfig(**vars(r)),
        retry_base_s=0.05,
        retry_max_s=0.2,
        retry_window_s=10.0,
        **kw,
    )
    return Gateway(cfg, cache)


def req(text="q", stage="rollout", role_name="target", **kw) -> ChatRequest:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]
    return ChatRequest(role_name, stage, msgs, key=f"k-{text}", **kw)


# --- which API: the reference's rule ------------------------------------------------------------------------------


def test_auto_sends_the_reference_model_list_to_responses_by_name_or_name_dash_suffix():
    for name in ("gpt-5-codex", " GPT-5.4-Pro ", "gpt-5.1-codex-mini", "codex-mini-latest", "gpt-5.2-codex-2026-01"):
        assert listed_for_responses(name), name
    for name in ("gpt-5.5", "gpt-5.5-pro", "gpt-5-codexx", "my-gpt-5-codex", "gpt-5.4", "codex", "gpt-5.4-pro2"):
        assert not listed_for_responses(name), name
    assert resolved_api("openai", "auto", "gpt-5.4-pro") == "responses"
    assert resolved_api("azure", "auto", "gpt-5-codex") == "responses"
    assert resolved_api("embedded", "auto", "gpt-5-codex") == "chat"  # only OpenAI's and Azure's APIs have it
    assert resolved_api("openai", "chat", "gpt-5-codex") == "chat"
    assert resolved_api("openai", "responses", "gpt-4o") == "responses"


def test_settings_only_one_api_takes_are_one_line_errors(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    ok = ["+experiment=searchqa", "llm=paper"]
    obj = cli.compose([*ok, "llm.target.model=gpt-5-codex", "llm.target.reasoning_summary=auto"])
    assert obj.llm.target.reasoning_summary == "auto"
    bad = {
        "llm.target.reasoning_summary=auto": "Responses API only",
        "llm.target.api=sideways": "llm.target.api='sideways' is invalid",
        "llm.target.thinking=enabled": "thinking_wire",
    }
    for override, words in bad.items():
        with pytest.raises((ConfigError, cli.UsageError)) as e:
            cli.compose([*ok, override])
        assert words.replace(" only", "") in str(e.value) and "\n" not in str(e.value), override
    with pytest.raises((ConfigError, cli.UsageError)) as e:
        cli.compose(["+experiment=searchqa", "llm=claude", "llm.target.api=responses"])
    assert "provider openai or azure" in str(e.value)
    with pytest.raises((ConfigError, cli.UsageError)) as e:
        cli.compose(["+experiment=searchqa", "llm=azure", "llm.target.model=gpt-5.4-pro"])
    assert "azure_api_version=2024-10-21 predates" in str(e.value)


# --- one capability each ------------------------------------------------------------------------------------------


def test_text_goes_as_input_with_max_output_tokens_and_nothing_stored(srv, run):
    gw = gateway(srv.base_url)
    res = run(gw.chat(req("hello")))
    assert json.loads(res.content) == {"answer": "hello"} and res.finish_reason == "stop"
    body = srv.state.bodies[-1]
    assert srv.state.paths[-1] == "/v1/responses"
    assert body["input"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    assert body["max_output_tokens"] == 64 and body["store"] is False
    assert not {"messages", "max_tokens", "max_completion_tokens", "reasoning_effort"} & set(body)
    e = gw.ledger.entries["target/rollout"]
    assert (e.calls, e.prompt_tokens, e.completion_tokens) == (1, srv.state.prompt_tokens, srv.state.completion_tokens)


def test_chat_stays_chat_for_a_model_not_on_the_list(srv, run):
    gw = gateway(srv.base_url, role=dict(model="gpt-5.5-pro"))
    run(gw.chat(req("hi")))
    assert srv.state.paths[-1] == "/v1/chat/completions" and "messages" in srv.state.bodies[-1]


def test_reasoning_effort_and_summary(srv, run, tmp_path):
    gw = gateway(
        srv.base_url, str(tmp_path / "c.sqlite"), role=dict(reasoning_effort="high", reasoning_summary="detailed")
    )
    res = run(gw.chat(req("why")))
    assert srv.state.bodies[-1]["reasoning"] == {"effort": "high", "summary": "detailed"}
    assert res.reasoning_summary == "scripted reasoning"
    e = gw.ledger.entries["target/rollout"]
    assert e.reasoning_tokens == srv.reasoning_tokens == 8 and e.completion_tokens == srv.state.completion_tokens
    again = run(gw.chat(req("why")))  # the summary is recorded with the reply and replayed with it
    assert again.cached and again.reasoning_summary == "scripted reasoning" and srv.state.attempts == 1


def test_image_parts_go_as_input_images(srv, run):
    url = "data:image/png;base64,iVBORw0KGgo="
    parts = [
        {"type": "text", "text": "what page?"},
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    gw = gateway(srv.base_url)
    res = run(gw.chat(ChatRequest("target", "rollout", [{"role": "user", "content": parts}], key="img")))
    assert json.loads(res.content) == {"answer": "what page?"}
    assert srv.state.bodies[-1]["input"][0]["content"] == [
        {"type": "input_text", "text": "what page?"},
        {"type": "input_image", "image_url": url, "detail": "high"},
        {"type": "input_image", "image_url": url, "detail": "auto"},
    ]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "search a file",
            "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
        },
    }
]


def _tool_policy(body, headers):
    """First turn: call grep; once its result is back: answer with it."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if not results:
        call = {"id": "call_7", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "tax"}'}}
        return {"content": "", "tool_calls": [call]}
    return f"<answer>{results[-1]['content']}</answer>"


def test_function_tools_map_to_and_from_the_chat_shape(run):
    with ScriptedServer(policy=_tool_policy) as srv:
        gw = gateway(srv.base_url, role=dict(reasoning_effort="medium"))
        msgs = [{"role": "user", "content": "find the tax"}]
        first = run(gw.chat(ChatRequest("target", "rollout", msgs, "t1", tools=TOOLS, tool_choice="auto")))
        assert first.finish_reason == "tool_calls" and first.content == ""
        assert first.tool_calls == [
            {"id": "call_7", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "tax"}'}}
        ]
        body = srv.state.bodies[-1]
        assert body["tools"] == [
            {
                "type": "function",
                "name": "grep",
                "strict": False,
                "parameters": TOOLS[0]["function"]["parameters"],
                "description": "search a file",
            }
        ]
        assert body["tool_choice"] == "auto" and "reasoning" not in body  # no effort with tools, as on chat
        msgs += [
            {"role": "assistant", "content": "", "tool_calls": first.tool_calls},
            {"role": "tool", "tool_call_id": "call_7", "content": "12: tax 42"},
        ]
        second = run(gw.chat(ChatRequest("target", "rollout", msgs, "t2", tools=TOOLS, tool_choice="auto")))
        assert second.content == "<answer>12: tax 42</answer>" and second.finish_reason == "stop"
        assert srv.state.bodies[-1]["input"][1:] == [
            {"type": "function_call", "call_id": "call_7", "name": "grep", "arguments": '{"pattern": "tax"}'},
            {"type": "function_call_output", "call_id": "call_7", "output": "12: tax 42"},
        ]


def test_json_schema_output_goes_as_text_format(srv, run):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    gw = gateway(srv.base_url)
    res = run(gw.chat_json(req("edits", stage="analyst", role_name="optimizer"), schema, name="analyst_reply"))
    assert res.data == {"answer": "edits"} and not res.reasked
    assert srv.state.bodies[-1]["text"] == {
        "format": {"type": "json_schema", "name": "analyst_reply", "schema": schema}
    }
    gw = gateway(srv.base_url, role=dict(structured_output="json_object"))
    run(gw.chat_json(req("obj", role_name="optimizer"), schema))
    assert srv.state.bodies[-1]["text"] == {"format": {"type": "json_object"}}


def test_usage_and_cost_from_the_responses_usage_fields(srv, run):
    srv.cached_tokens = 3
    price = PriceConfig(input_per_mtok=2.0, output_per_mtok=10.0, cached_input_per_mtok=0.5)
    gw = gateway(srv.base_url, role=dict(reasoning_effort="low"), prices={"gpt-5.3-codex": price})
    res = run(gw.chat(req("a longer question for the cache")))
    e = gw.ledger.entries["target/rollout"]
    assert (res.prompt_tokens, res.completion_tokens) == (e.prompt_tokens, e.completion_tokens)
    assert (e.cached_tokens, e.reasoning_tokens) == (3, 8)
    expected = ((e.prompt_tokens - 3) * 2.0 + 3 * 0.5 + e.completion_tokens * 10.0) / 1e6
    assert e.cost_usd == pytest.approx(expected)


def test_retries_and_the_completion_limit_retry_hold_for_responses(srv, run):
    srv.inject(Fault(503), Fault(429, retry_after=0.05), Fault(200, finish_reason="length"))
    gw = gateway(srv.base_url)
    res = run(gw.chat(req("cut")))
    assert json.loads(res.content) == {"answer": "cut"} and srv.state.attempts == 4
    assert [b["max_output_tokens"] for b in list(srv.state.bodies)[2:]] == [64, 128]
    e = gw.ledger.entries["target/rollout"]
    assert (e.calls, e.truncated) == (2, 1)
    assert (e.prompt_tokens, e.completion_tokens) == (srv.state.prompt_tokens, srv.state.completion_tokens)


def test_incomplete_replies_are_named_errors_and_still_billed(srv, run):
    srv.inject(Fault(200, finish_reason="length"), Fault(200, finish_reason="length"))
    gw = gateway(srv.base_url)
    with pytest.raises(ReplyTruncated):
        run(gw.chat(req("long")))
    srv.inject(Fault(200, finish_reason="content_filter"))
    with pytest.raises(ReplyFiltered):
        run(gw.chat(req("rude")))
    t = gw.ledger.totals()
    assert (t["calls"], t["truncated"], t["filtered"]) == (3, 2, 1)
    assert (t["prompt_tokens"], t["completion_tokens"]) == (srv.state.prompt_tokens, srv.state.completion_tokens)


def test_cache_keys_differ_between_apis_and_replay_makes_no_call(srv, run, tmp_path):
    cache = str(tmp_path / "c.sqlite")
    responses = gateway(srv.base_url, cache)
    chat = gateway(srv.base_url, cache, role=dict(api="chat"))
    assert "api" not in chat._cache_payload(req("x"))  # chat keys are the ones recorded before this setting existed
    assert responses._cache_payload(req("x")) == {**chat._cache_payload(req("x")), "api": "responses"}
    run(responses.chat(req("x")))
    run(chat.chat(req("x")))
    assert srv.state.attempts == 2 and list(srv.state.paths) == ["/v1/responses", "/v1/chat/completions"]
    run(responses.close())
    run(chat.close())
    replay = gateway(srv.base_url, cache, cache_mode="replay")
    assert run(replay.chat(req("x"))).cached and srv.state.attempts == 2
    with pytest.raises(CacheMiss):
        run(replay.chat(req("never asked")))
    assert srv.state.attempts == 2 and replay.ledger.totals()["calls"] == 0


def test_azure_responses_endpoint(srv, run, monkeypatch):
    monkeypatch.setenv("AZURE_TEST_KEY", "az-secret")
    r = role(
        None,
        provider="azure",
        model="my-codex-deployment",
        api="responses",
        azure_endpoint=srv.base_url.rsplit("/v1", 1)[0],
        api_key_env="AZURE_TEST_KEY",
    )
    gw = Gateway(LLMConfig(backend="azure", target=r, optimizer=LLMRoleConfig(**vars(r))), None)
    res = run(gw.chat(req("azure")))
    assert json.loads(res.content) == {"answer": "azure"}
    assert srv.state.paths[-1] == "/openai/responses?api-version=2025-04-01-preview"
    assert srv.state.bodies[-1]["model"] == "my-codex-deployment"


# --- the gateway's limits hold for Responses calls as for chat ---------------------------------------------------


def test_a_silent_responses_endpoint_is_named_by_the_probe(silent_port, run):
    gw = gateway(f"http://127.0.0.1:{silent_port}/v1", role=dict(timeout_s=60.0, silence_probe_s=0.5))
    t0 = time.monotonic()
    with pytest.raises(LLMUnavailable) as e:
        run(gw.chat(req("anyone?")))
    assert time.monotonic() - t0 < 60 / 2 and "nothing answered" in e.value.message  # not the 60 s read timeout


def test_a_hung_responses_route_is_named_by_a_probe_of_that_route(run):
    with ScriptedServer(policy=_answer) as srv:
        srv.route_hang_s = 30.0  # GET /v1/models still answers
        gw = gateway(srv.base_url, role=dict(timeout_s=20.0, silence_probe_s=0.5))
        t0 = time.monotonic()
        with pytest.raises(LLMUnavailable) as e:
            run(gw.chat(req("anyone?")))
        assert time.monotonic() - t0 < 20 / 2 and "POST /responses" in e.value.message  # not the 20 s read timeout
    with ScriptedServer(policy=_answer) as srv:  # a slow call on a live route is waited for, probed on its route
        srv.inject(Fault(200, hang_s=1.5, finish_reason="stop"))
        gw = gateway(srv.base_url, role=dict(silence_probe_s=0.3))
        assert json.loads(run(gw.chat(req("slow"))).content) == {"answer": "slow"}
        assert srv.state.attempts == 1 and srv.state.refused >= 1


def test_concurrency_limit_and_call_budget_hold_for_responses(run):
    with ScriptedServer(policy=_answer, latency_s=0.2) as srv:
        gw = gateway(srv.base_url, role=dict(max_concurrency=2), budget=BudgetConfig(max_calls=5))

        async def many():
            return await asyncio.gather(*(gw.chat(req(f"q{i}")) for i in range(8)), return_exceptions=True)

        results = run(many())
        assert srv.state.peak_in_flight <= 2 and srv.state.attempts == 5  # no more than the cap reached the server
        assert sum(isinstance(r, BudgetExceeded) for r in results) == 3
        assert gw.ledger.totals()["calls"] == 5
