"""The Anthropic Messages backend (llm.<role>.provider=anthropic) over real HTTP with the anthropic SDK against a
scripted Messages server: request translation (system apart, tools, tool_use / tool_result blocks), the reply's
text, tool calls and usage in the ledger, the gateway's retries on overload, a rejection in one line; and the
agent endpoint's protocol translation for both CLIs."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers import MessagesServer
from skillopt_envs.chat import ChatRequest

from skillopt_ray.llm.agent_api import AgentReply, messages_to_chat, responses_events, responses_to_chat
from skillopt_ray.llm.types import LLMRequestRejected


def _gateway(url, tmp_path):
    from skillopt_ray.config import from_container
    from skillopt_ray.llm.gateway import Gateway

    role = {"provider": "anthropic", "model": "claude-test", "base_url": url, "max_tokens": 300}
    llm = {"target": role, "optimizer": role, "retry_base_s": 0.01, "retry_max_s": 0.02, "cache_mode": "off",
           "prices": {"claude-test": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}}  # fmt: skip
    cfg = from_container({"experiment": "_", "llm": llm}).llm
    return Gateway(cfg, None, str(tmp_path / "ledger.json"))


def test_anthropic_backend_translates_and_records(tmp_path):
    tool_reply = AgentReply("", [{"id": "tu_1", "name": "lookup", "arguments": '{"q": "x"}'}], 40, 7)
    with MessagesServer([(529, None), (200, AgentReply("Hello there", [], 30, 5)), (200, tool_reply)]) as srv:
        gw = _gateway(f"http://127.0.0.1:{srv.port}", tmp_path)
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        loop = asyncio.new_event_loop()  # one loop for the gateway's clients
        res = loop.run_until_complete(gw.chat(ChatRequest("optimizer", "analyst", msgs)))
        assert res.content == "Hello there" and (res.prompt_tokens, res.completion_tokens) == (30, 5)
        assert len(srv.bodies) == 2  # the 529 was retried by the gateway's policy
        body = srv.bodies[1]
        assert body["system"] == "Be brief." and body["max_tokens"] == 300 and body["model"] == "claude-test"
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
        tools = [
            {"type": "function", "function": {"name": "lookup", "description": "d", "parameters": {"type": "object"}}}
        ]
        history = msgs + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "tu_0", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "a"}'}}]},
            {"role": "tool", "tool_call_id": "tu_0", "content": "found a"},
        ]  # fmt: skip
        res2 = loop.run_until_complete(
            gw.chat(ChatRequest("target", "rollout", history, tools=tools, tool_choice="auto"))
        )
        body2 = srv.bodies[2]
        assert body2["tools"] == [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}]
        assert body2["messages"][1] == {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu_0", "name": "lookup", "input": {"q": "a"}}],
        }
        assert body2["messages"][2] == {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu_0", "content": "found a"}],
        }
        assert res2.tool_calls == [
            {"id": "tu_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
        ]
        assert res2.finish_reason == "tool_calls"
        ledger = gw.save_ledger()
        assert (
            ledger["entries"]["optimizer/analyst"]["calls"] == 1
            and ledger["entries"]["target/rollout"]["prompt_tokens"] == 40
        )
        assert ledger["totals"]["cost_usd"] == pytest.approx((70 * 3.0 + 12 * 15.0) / 1e6)
        loop.run_until_complete(gw.close())
        loop.close()


def test_anthropic_rejection_is_one_line(tmp_path):
    with MessagesServer([(400, None)]) as srv:
        gw = _gateway(f"http://127.0.0.1:{srv.port}", tmp_path)
        loop = asyncio.new_event_loop()
        with pytest.raises(LLMRequestRejected, match="HTTP 400") as e:
            loop.run_until_complete(gw.chat(ChatRequest("target", "rollout", [{"role": "user", "content": "x"}])))
        assert "\n" not in str(e.value)
        loop.run_until_complete(gw.close())
        loop.close()


def test_responses_and_messages_translation():
    body = {
        "instructions": "sys",
        "input": [
            {"type": "message", "id": "m1", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
            {"type": "message", "id": "m2", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "id": "r1", "summary": []},
            {"type": "function_call", "id": "f1", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd":"ls"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
        ],
        "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
                  {"type": "custom", "name": "apply_patch"}, {"type": "web_search"}],
    }  # fmt: skip
    msgs, tools, custom = responses_to_chat(body)
    assert msgs[0] == {"role": "system", "content": "sys\n\ndev"}  # adjacent system text joined, ids dropped
    assert msgs[2]["tool_calls"][0]["function"] == {"name": "exec_command", "arguments": '{"cmd":"ls"}'}
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
    assert json.loads(msgs[4]["tool_calls"][0]["function"]["arguments"]) == {"input": "*** Begin Patch"}
    assert [t["function"]["name"] for t in tools] == ["exec_command", "apply_patch"] and custom == {"apply_patch"}
    reply = AgentReply("", [{"id": "c3", "name": "apply_patch", "arguments": '{"input": "P"}'}], 3, 4)
    events = [e.decode() for e in responses_events(reply, "r1", "m", custom)]
    assert events[0].startswith("event: response.created") and events[-1].startswith("event: response.completed")
    item = json.loads(events[1].split("data: ", 1)[1])["item"]
    assert item == {
        "type": "custom_tool_call",
        "id": "ctc_c3",
        "call_id": "c3",
        "name": "apply_patch",
        "input": "P",
        "status": "completed",
    }
    done = json.loads(events[-1].split("data: ", 1)[1])["response"]
    assert done["usage"]["input_tokens"] == 3 and done["usage"]["output_tokens"] == 4

    cm, ctools = messages_to_chat({
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1"}, {"type": "text", "text": "S"}],
        "messages": [
            {"role": "system", "content": "inner system"},
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "tool_use", "id": "u1", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "content": [{"type": "text", "text": "out"}], "is_error": True}]},
        ],
        "tools": [{"name": "Bash", "description": "d", "input_schema": {"type": "object"}}],
    })  # fmt: skip
    # the per-run billing line is dropped; a system entry inside messages is accepted (joined to the one before it)
    assert cm[0] == {"role": "system", "content": "S\n\ninner system"}
    assert cm[1] == {"role": "user", "content": "q"}
    assert cm[2]["content"] == "t" and cm[2]["tool_calls"][0]["function"] == {
        "name": "Bash",
        "arguments": '{"command": "ls"}',
    }
    assert cm[3] == {"role": "tool", "tool_call_id": "u1", "content": "[error] out"}
    assert ctools[0]["function"]["parameters"] == {"type": "object"}
