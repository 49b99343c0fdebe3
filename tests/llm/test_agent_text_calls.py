"""What a small local model really sends an agent CLI, through the agent endpoint: each case below is an output
Qwen2.5-Coder-1.5B wrote on the local server (README "A real model learns"), replayed by the scripted server and
translated by the endpoint as Codex (Responses) and Claude Code (Messages) would receive it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from scripted_server import ScriptedServer

from skillopt_ray import cli
from skillopt_ray.llm.agent_api import MAX_AGENT_CALLS, AgentAPIServer
from skillopt_ray.llm.gateway import Gateway

EXEC_PARAMS = {
    "type": "object",
    "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
    "required": ["cmd"],
    "additionalProperties": False,
}
FENCED_CALL = '```json\n{\n  "name": "exec_command",\n  "arguments": {\n    "cmd": "ls -l"\n  }\n}\n```'
INVENTED_TOOL = '```json\n{\n  "name": "read_file",\n  "arguments": {\n    "file_path": "solution.py"\n  }\n}\n```'


def _codex_body(text: str = "Write solution.py.") -> dict[str, Any]:
    return {
        "model": "m",
        "instructions": "You are a coding agent.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}],
        "tools": [{"type": "function", "name": "exec_command", "description": "run", "parameters": EXEC_PARAMS}],
        "stream": False,
    }


def _claude_body() -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Write solution.py."}],
        "tools": [{"name": "exec_command", "description": "run", "input_schema": EXEC_PARAMS}],
    }


async def _ask(policy: Any, path: str, body: dict[str, Any], tmp_path, calls: int = 1, **server_kw) -> list[dict]:
    """`calls` posts of `body` to a fresh episode endpoint whose model is the scripted server."""
    with ScriptedServer(policy=policy) as srv:
        obj = cli.compose(["+experiment=searchqa", "llm=compatible", f"llm.base_url={srv.base_url}"])
        gw = Gateway(obj.llm, None)
        server = AgentAPIServer(gw, "ep/t1", **server_kw)
        sock = str(tmp_path / "agent.sock")
        await server.start(sock)
        out = []
        try:
            async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=sock)) as s:
                for _ in range(calls):
                    async with s.post(f"http://agent{path}", json=body) as r:
                        assert r.status == 200, await r.text()
                        out.append(await r.json())
        finally:
            await server.stop()
            await gw.close()
        out.append({"upstream_calls": srv.state.attempts})
        return out


def test_a_fenced_json_call_reaches_codex_as_a_function_call(tmp_path):
    replies = asyncio.run(_ask(lambda body, h: FENCED_CALL, "/v1/responses", _codex_body(), tmp_path))
    items = replies[0]["output"]
    calls = [i for i in items if i["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("exec_command", {"cmd": "ls -l"})]
    assert calls[0]["call_id"]  # an id the CLI can answer to
    assert not [i for i in items if i["type"] == "message"]  # the JSON text is gone: it became the call


def test_a_fenced_json_call_reaches_claude_code_as_tool_use(tmp_path):
    replies = asyncio.run(_ask(lambda body, h: FENCED_CALL, "/v1/messages", _claude_body(), tmp_path))
    msg = replies[0]
    assert msg["stop_reason"] == "tool_use"
    assert [(b["type"], b.get("input")) for b in msg["content"]] == [("tool_use", {"cmd": "ls -l"})]


def test_an_invented_tool_stays_text_and_ends_the_turn(tmp_path):
    replies = asyncio.run(_ask(lambda body, h: INVENTED_TOOL, "/v1/responses", _codex_body(), tmp_path))
    items = replies[0]["output"]
    assert [i["type"] for i in items] == ["message"]
    assert "read_file" in items[0]["content"][0]["text"]


def test_broken_arguments_of_a_real_call_are_repaired(tmp_path):
    call = {"id": "x1", "type": "function", "function": {"name": "exec_command", "arguments": '{"cmd": "pwd"}\n}'}}
    policy = lambda body, h: {"content": "", "tool_calls": [call]}  # noqa: E731
    replies = asyncio.run(_ask(policy, "/v1/responses", _codex_body(), tmp_path))
    calls = [i for i in replies[0]["output"] if i["type"] == "function_call"]
    assert json.loads(calls[0]["arguments"]) == {"cmd": "pwd"}


def test_an_endless_tool_loop_is_ended_with_a_final_message_after_the_call_limit(tmp_path):
    """The model calls `ls` forever: the endpoint stops asking it after max_calls and answers the CLI with a plain
    message (no tool call), so the agent's turn ends and the episode is scored on what it did."""
    replies = asyncio.run(
        _ask(lambda body, h: FENCED_CALL, "/v1/responses", _codex_body(), tmp_path, calls=5, max_calls=3)
    )
    kinds = [[i["type"] for i in r["output"]] for r in replies[:-1]]
    assert kinds[:3] == [["function_call"]] * 3 and kinds[3:] == [["message"]] * 2
    assert "3 model calls" in replies[3]["output"][0]["content"][0]["text"]
    assert replies[-1]["upstream_calls"] == 3  # the model was not asked again past the limit
    assert MAX_AGENT_CALLS >= 20  # the default leaves a real agent room for a small task


# Codex's first call on the local model (6,101 prompt tokens): the model invented a task and ended with a fenced
# call to a tool named after the skill, with arguments shaped like Codex's question tool
SKILL_NAMED_CALL = (
    "**Final Answer**\n\n```json\n"
    + json.dumps(
        {
            "name": "skillopt-target",
            "arguments": {"id": "skillopt-target", "header": "Create `example.py`", "options": [{"label": "Yes"}]},
        },
        indent=2,
    )
    + "\n```"
)


def test_a_call_to_a_tool_named_after_the_skill_is_the_final_text(tmp_path):
    body = _codex_body()
    body["tools"].append(
        {
            "type": "function",
            "name": "request_user_input",
            "parameters": {"type": "object", "properties": {"header": {"type": "string"}}, "required": ["header"]},
        }
    )
    replies = asyncio.run(_ask(lambda b, h: SKILL_NAMED_CALL, "/v1/responses", body, tmp_path))
    items = replies[0]["output"]
    assert [i["type"] for i in items] == ["message"] and "skillopt-target" in items[0]["content"][0]["text"]


# Claude Code's first real call on the local model (2,690 prompt tokens): a fenced call to its own Read tool
READ_CALL = (
    '```json\n{\n  "name": "Read",\n  "arguments": {\n'
    '    "file_path": "/workspace/.agents/skills/skillopt-target/SKILL.md"\n  }\n}\n```'
)


def test_claude_codes_read_written_as_text_reaches_it_as_tool_use(tmp_path):
    body = _claude_body()
    body["tools"].append(
        {
            "name": "Read",
            "description": "Read a file",
            "input_schema": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}, "offset": {"type": "number"}},
                "required": ["file_path"],
                "additionalProperties": False,
            },
        }
    )
    replies = asyncio.run(_ask(lambda b, h: READ_CALL, "/v1/messages", body, tmp_path))
    msg = replies[0]
    assert msg["stop_reason"] == "tool_use"
    blocks = [(b["type"], b.get("name"), b.get("input")) for b in msg["content"]]
    assert blocks == [("tool_use", "Read", {"file_path": "/workspace/.agents/skills/skillopt-target/SKILL.md"})]
