"""The embedded backend really starts, answers through the openai client, and leaves no process behind."""

from __future__ import annotations

import json
import os

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
