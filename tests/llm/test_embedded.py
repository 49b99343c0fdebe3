"""The embedded backend really starts, answers through the openai client, and leaves no process behind."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

pytestmark = pytest.mark.slow


def test_embedded_server_chat_and_schema_json_then_clean_shutdown(tmp_path):
    import openai

    from skillopt_ray.llm.embedded import EmbeddedServer

    srv = EmbeddedServer(ctx_size=2048, log_path=tmp_path / "server.log")
    url = srv.start()
    pid = srv.proc.pid
    try:
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
        r = client.chat.completions.create(
            model="smollm2-135m", messages=[{"role": "user", "content": "Say hello."}], max_tokens=16
        )
        assert r.choices[0].message.content.strip() and r.usage.completion_tokens > 0
        schema = {
            "type": "object",
            "properties": {"action": {"type": "string", "enum": ["go to desk 1", "look"]}},
            "required": ["action"],
        }
        r = client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": "Pick an action."}],
            max_tokens=32,
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        )
        assert json.loads(r.choices[0].message.content)["action"] in ("go to desk 1", "look")
    finally:
        srv.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _local(*extra: str):
    from skillopt_ray import cli

    obj = cli.compose(["+experiment=searchqa", "llm=local", *extra])
    return obj, cli.plain(obj)


def test_local_preset_starts_its_server_with_tools_on_a_small_model(tmp_path):
    """The preset's plumbing (threads, slots, chat template with tools) on SmolLM2 instead of the 1.1 GB model."""
    import openai

    from skillopt_ray.cli.launch import EmbeddedStart
    from skillopt_ray.llm.embedded import default_model_path

    _, data = _local(f"llm.embedded.model_path={default_model_path()}", "llm.embedded.ctx_size=4096")
    start = EmbeddedStart(data, tmp_path)
    try:
        url = start.wait()
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
        tool = {
            "type": "function",
            "function": {
                "name": "exec_command",
                "description": "Run a shell command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
            },
        }
        ask = {"model": "any", "messages": [{"role": "user", "content": "List the files here."}], "max_tokens": 8}
        r = client.chat.completions.create(tools=[tool], **ask)  # a request with tools is taken (jinja templates)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls") and r.usage.completion_tokens > 0
        with urllib.request.urlopen(url.removesuffix("/v1") + "/props", timeout=30) as resp:
            props = json.load(resp)
        assert props["total_slots"] == 2 and props["model_path"] == str(default_model_path())
    finally:
        start.stop()
    pid = start.server.proc.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
