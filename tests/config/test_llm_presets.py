"""Provider presets for what the reference runs: llm=qwen (vLLM), llm=minimax, and the Claude chat backend's
reasoning effort. Each preset is composed as a user would, its request bodies checked against a scripted server,
and its missing key named in one line."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers import MessagesServer
from scripted_server import Fault, ScriptedServer
from skillopt_envs.chat import ChatRequest

from skillopt_ray import cli
from skillopt_ray.cli.checks import check_keys
from skillopt_ray.config import ConfigError, from_container, to_container
from skillopt_ray.llm.gateway import Gateway
from skillopt_ray.llm.types import LLMRequestRejected


def _echo(body, headers):
    return json.dumps({"answer": "ok"})


def _preset(name: str, url: str, *extra: str):
    """The preset composed for SearchQA, both roles sent to the scripted server."""
    obj = cli.compose(["+experiment=searchqa", f"llm={name}", *extra])
    obj.llm.target.base_url = obj.llm.optimizer.base_url = url
    return obj


def _bodies(obj, srv, run) -> tuple[dict, dict]:
    """(target body, optimizer body) of one call each, the target asking the reference's 16384-token budget."""
    gw = Gateway(obj.llm, None)
    run(gw.chat(ChatRequest("target", "rollout", [{"role": "user", "content": "q"}], "t", max_tokens=16384)))
    run(gw.chat(ChatRequest("optimizer", "analyst", [{"role": "user", "content": "p"}], "o")))
    run(gw.close())
    target, optimizer = list(srv.state.bodies)[-2:]
    return target, optimizer


@pytest.fixture()
def keys(monkeypatch):
    for k in ("OPENAI_API_KEY", "QWEN_CHAT_API_KEY", "MINIMAX_API_KEY"):
        monkeypatch.setenv(k, "sk-test")
    for k in ("QWEN_CHAT_BASE_URL", "QWEN_CHAT_MODEL", "MINIMAX_BASE_URL", "MINIMAX_MODEL"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_qwen_preset_sends_the_references_parameters_and_thinking_switch(keys, run):
    obj = cli.compose(["+experiment=searchqa", "llm=qwen"])
    assert (obj.llm.target.base_url, obj.llm.target.model) == ("http://localhost:8000/v1", "Qwen/Qwen3.5-4B")
    with ScriptedServer(policy=_echo) as srv:
        target, optimizer = _bodies(_preset("qwen", srv.base_url), srv, run)
        assert target == {
            "model": "Qwen/Qwen3.5-4B",
            "messages": [{"role": "user", "content": "q"}],
            "temperature": 0.7,
            "max_tokens": 8000,  # the smaller of the call's 16384 and the server's 8000
        }  # server_default: no chat_template_kwargs; no reasoning effort, no response_format
        assert optimizer["model"] == "gpt-5.5" and optimizer["reasoning_effort"] == "medium"  # the optimizer stays
        for mode, flag in (("enabled", True), ("disabled", False)):
            target, _ = _bodies(_preset("qwen", srv.base_url, f"llm.target.thinking={mode}"), srv, run)
            assert target["chat_template_kwargs"] == {"enable_thinking": flag}


def test_minimax_preset_sends_the_default_model_and_its_thinking_object(keys, run):
    obj = cli.compose(["+experiment=searchqa", "llm=minimax"])
    assert (obj.llm.target.base_url, obj.llm.target.model) == ("https://api.minimax.io/v1", "MiniMax-M3")
    with ScriptedServer(policy=_echo) as srv:
        target, _ = _bodies(_preset("minimax", srv.base_url), srv, run)
        assert target["model"] == "MiniMax-M3" and target["max_tokens"] == 8000 and target["temperature"] == 0.7
        assert target["thinking"] == {"type": "disabled"} and "chat_template_kwargs" not in target
        target, _ = _bodies(_preset("minimax", srv.base_url, "llm.target.thinking=enabled"), srv, run)
        assert target["thinking"] == {"type": "adaptive"}
        target, _ = _bodies(_preset("minimax", srv.base_url, "llm.target.model=MiniMax-M2.5"), srv, run)
        assert target["thinking"] == {"type": "adaptive"}  # M2 models always think
    with pytest.raises((ConfigError, cli.UsageError)) as e:
        cli.compose(
            ["+experiment=searchqa", "llm=minimax", "llm.target.model=MiniMax-M2", "llm.target.thinking=disabled"]
        )
    assert "MiniMax-M2 models always think" in str(e.value)


@pytest.mark.parametrize(("preset", "var"), [("qwen", "QWEN_CHAT_API_KEY"), ("minimax", "MINIMAX_API_KEY")])
def test_a_missing_key_is_named_in_one_line(keys, preset, var):
    keys.delenv(var)
    data = cli.plain(cli.compose(["+experiment=searchqa", f"llm={preset}"]))
    with pytest.raises(cli.UsageError) as e:
        check_keys(to_container(data))
    assert var in str(e.value) and "llm.target" in str(e.value) and "\n" not in str(e.value)


def test_a_key_the_server_refuses_names_its_variable(keys, run):
    with ScriptedServer(policy=_echo) as srv:
        srv.inject(Fault(401))
        gw = Gateway(_preset("qwen", srv.base_url).llm, None)
        with pytest.raises(LLMRequestRejected) as e:
            run(gw.chat(ChatRequest("target", "rollout", [{"role": "user", "content": "q"}], "t")))
        assert "HTTP 401" in e.value.message and "QWEN_CHAT_API_KEY" in e.value.message
        assert "sk-test" not in e.value.message


def test_claude_reasoning_effort_maps_as_the_reference(tmp_path):
    """low|medium|high|xhigh|max go as output_config.effort; none or minimal send nothing (the model's default)."""
    from skillopt_ray.llm.agent_api import AgentReply

    sent = {}
    for effort in ("medium", "xhigh", "max", "none", "minimal"):
        with MessagesServer([(200, AgentReply("hi", [], 3, 1))]) as srv:
            role = {"provider": "anthropic", "model": "claude-sonnet-4-6", "base_url": f"http://127.0.0.1:{srv.port}",
                    "max_tokens": 300, "reasoning_effort": effort}  # fmt: skip
            llm = {"target": role, "optimizer": role, "cache_mode": "off"}
            gw = Gateway(from_container({"experiment": "_", "llm": llm}).llm, None)
            loop = asyncio.new_event_loop()
            loop.run_until_complete(gw.chat(ChatRequest("target", "rollout", [{"role": "user", "content": "x"}])))
            loop.run_until_complete(gw.close())
            loop.close()
            sent[effort] = srv.bodies[0].get("output_config")
    assert sent == {
        "medium": {"effort": "medium"},
        "xhigh": {"effort": "xhigh"},
        "max": {"effort": "max"},
        "none": None,
        "minimal": None,
    }
    obj = cli.compose(["+experiment=searchqa", "llm=claude"])
    assert obj.llm.target.reasoning_effort == obj.llm.optimizer.reasoning_effort == "medium"
    with pytest.raises((ConfigError, cli.UsageError)):
        cli.compose(["+experiment=searchqa", "llm=paper", "llm.target.reasoning_effort=max"])
