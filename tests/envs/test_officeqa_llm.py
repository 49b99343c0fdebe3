"""Function tools end to end through the LLM layer: the request carries `tools`/`tool_choice`, the reply's
`tool_calls` come back on the result, and the response cache replays them (real client, scripted server)."""

from __future__ import annotations

import asyncio

from scripted_server import ScriptedServer
from skillopt_envs.chat import ChatRequest

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "search",
            "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
        },
    }
]


def _policy(body, headers):
    if body.get("tools"):
        return {
            "content": "looking",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "gold"}'}}
            ],
        }
    return "<answer>plain</answer>"


def _cfg(url: str, cache: str) -> LLMConfig:
    role = LLMRoleConfig(
        provider="openai", model="m", base_url=url, api_key_env="", timeout_s=5.0, reasoning_effort="low"
    )
    return LLMConfig(backend="compatible", target=role, optimizer=role, cache_mode="record" if cache else "off")


def test_tools_and_tool_calls_cross_the_gateway_and_the_cache(tmp_path):
    with ScriptedServer(policy=_policy) as srv:
        gw = Gateway(_cfg(srv.base_url, "x"), str(tmp_path / "cache.sqlite"))
        msgs = [{"role": "user", "content": "find gold"}]
        loop = asyncio.new_event_loop()
        try:
            with_tools = ChatRequest("target", "rollout", msgs, "k", tools=TOOLS, tool_choice="auto")
            r1 = loop.run_until_complete(gw.chat(with_tools))
            r2 = loop.run_until_complete(gw.chat(with_tools))  # replayed from the cache
            plain = loop.run_until_complete(gw.chat(ChatRequest("target", "rollout", msgs, "k")))
            loop.run_until_complete(gw.close())
        finally:
            loop.close()
        bodies = list(srv.state.bodies)
    assert r1.content == "looking" and r1.finish_reason == "tool_calls" and not r1.cached
    assert r1.tool_calls == [
        {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "gold"}'}}
    ]
    assert r2.cached and r2.tool_calls == r1.tool_calls
    # the same messages without tools are another request (not served from the tool request's cache entry)
    assert not plain.cached and plain.content == "<answer>plain</answer>" and plain.tool_calls == []
    assert len(bodies) == 2
    assert bodies[0]["tools"] == TOOLS and bodies[0]["tool_choice"] == "auto"
    assert "reasoning_effort" not in bodies[0]  # the reference sends none when tools are offered
    assert "tools" not in bodies[1] and bodies[1]["reasoning_effort"] == "low"
