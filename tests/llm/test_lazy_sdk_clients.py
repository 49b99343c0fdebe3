"""A role's SDK client is built at the role's first call; a missing key is still named when the gateway starts."""

from __future__ import annotations

import dataclasses
import json

import pytest
from skillopt_envs.chat import ChatRequest

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway
from skillopt_ray.llm.types import LLMConfigError


def _cfg(url: str, key_env: str = "SKILLOPT_TEST_KEY") -> LLMConfig:
    role = LLMRoleConfig(provider="openai", model="m", base_url=url, api_key_env=key_env, timeout_s=5.0)
    return LLMConfig(backend="compatible", target=role, optimizer=dataclasses.replace(role))


def test_the_target_client_is_made_at_start_the_others_only_when_they_call(server, tmp_path, monkeypatch, run):
    monkeypatch.setenv("SKILLOPT_TEST_KEY", "sk-test")
    gw = Gateway(_cfg(server.base_url), str(tmp_path / "c.sqlite"))
    # the target's client is made with the gateway (its first call only sends); the others wait for a call
    assert {role for role, ep in gw.endpoints.items() if ep._client is not None} == {"target"}
    res = run(gw.chat(ChatRequest("target", "rollout", [{"role": "user", "content": "q"}], key="k")))
    assert json.loads(res.content)["answer"] == "q"
    assert {role for role, ep in gw.endpoints.items() if ep._client is not None} == {"target"}
    run(gw.chat(ChatRequest("optimizer", "analyst", [{"role": "user", "content": "r"}], key="k2")))
    assert {role for role, ep in gw.endpoints.items() if ep._client is not None} == {"target", "optimizer"}
    run(gw.close())


def test_a_missing_key_is_named_when_the_gateway_starts_not_at_the_first_call(monkeypatch):
    monkeypatch.delenv("SKILLOPT_NO_SUCH_KEY", raising=False)
    cfg = _cfg("", key_env="SKILLOPT_NO_SUCH_KEY")  # no base_url: api.openai.com needs the key
    with pytest.raises(LLMConfigError, match="missing API key: set the environment variable SKILLOPT_NO_SUCH_KEY"):
        Gateway(cfg, None)
