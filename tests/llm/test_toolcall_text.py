"""Tool calls a small model writes as text: recovered only when they name an offered tool with fitting arguments.

The cases are the shapes Qwen2.5-Coder-1.5B wrote on the local server when offered tools (README "A real model
learns"): a fenced JSON object with name/arguments, a bare one, its template's <tool_call> tags, an invented tool."""

from __future__ import annotations

import json

from skillopt_ray.llm.toolcall_text import fits, recover_calls, repair_arguments

EXEC = {
    "type": "function",
    "function": {
        "name": "exec_command",
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}, "timeout_ms": {"type": "integer"}},
            "required": ["cmd"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [EXEC]


def test_a_fenced_json_call_to_an_offered_tool_becomes_a_call():
    text = '```json\n{\n  "name": "exec_command",\n  "arguments": {\n    "cmd": "ls -l"\n  }\n}\n```'
    got = recover_calls(text, TOOLS)
    assert got is not None and got.content == ""
    assert [(c.name, json.loads(c.arguments)) for c in got.calls] == [("exec_command", {"cmd": "ls -l"})]


def test_the_text_around_a_fenced_call_is_kept_as_the_message():
    text = 'I will list the files.\n```json\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n```\nThen read.'
    got = recover_calls(text, TOOLS)
    assert got is not None and got.content == "I will list the files.\n\nThen read."


def test_a_bare_object_and_tagged_calls_with_string_arguments():
    bare = recover_calls('{"name": "exec_command", "parameters": {"cmd": "pwd"}}', TOOLS)
    assert bare is not None and json.loads(bare.calls[0].arguments) == {"cmd": "pwd"}
    tagged = '<tool_call>\n{"name": "exec_command", "arguments": "{\\"cmd\\": \\"cat a.py\\"}"}\n</tool_call>'
    got = recover_calls(tagged, TOOLS)
    assert got is not None and json.loads(got.calls[0].arguments) == {"cmd": "cat a.py"}


def test_an_invented_tool_stays_the_final_text():
    text = '```json\n{"name": "read_file", "arguments": {"file_path": "solution.py"}}\n```'
    assert recover_calls(text, TOOLS) is None


def test_arguments_that_do_not_fit_stay_the_final_text():
    for args in ({"file_path": "x"}, {"cmd": 3}, {"cmd": "ls", "extra": 1}, {}):
        text = json.dumps({"name": "exec_command", "arguments": args})
        assert recover_calls(text, TOOLS) is None, args


def test_code_and_prose_are_never_calls():
    assert recover_calls("```python\ndef f(x):\n    return {x: 1}\n```", TOOLS) is None
    assert recover_calls("The answer is {42}.", TOOLS) is None
    assert recover_calls('```json\n{"name": "exec_command", "arguments": {"cmd": "ls"\n```', TOOLS) is None
    assert recover_calls('{"name": "exec_command", "arguments": {"cmd": "ls"}}', []) is None


def test_one_bad_call_among_several_recovers_none():
    good = '```json\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n```'
    bad = '```json\n{"name": "read_file", "arguments": {"path": "x"}}\n```'
    assert recover_calls(good + "\n" + bad, TOOLS) is None
    two = recover_calls(good + "\n" + good.replace("ls", "pwd"), TOOLS)
    assert two is not None and [json.loads(c.arguments)["cmd"] for c in two.calls] == ["ls", "pwd"]


def test_schema_fit_types_and_booleans():
    schema = {"properties": {"n": {"type": "integer"}, "x": {"type": ["number", "null"]}}, "required": ["n"]}
    assert fits({"n": 2, "x": None}, schema) and fits({"n": 2, "x": 1.5, "other": 1}, schema)
    assert not fits({"n": True}, schema) and not fits({"n": "2"}, schema) and not fits({"x": 1}, schema)


def test_arguments_with_trailing_text_are_repaired_else_left_alone():
    assert json.loads(repair_arguments('{"cmd": "ls"}\n}')) == {"cmd": "ls"}
    assert repair_arguments('{"cmd": "ls"}') == '{"cmd": "ls"}'
    assert repair_arguments("not json") == "not json"


def test_settle_reply_recovers_only_when_no_real_call_was_made():
    from skillopt_ray.llm.agent_api import AgentReply
    from skillopt_ray.llm.toolcall_text import settle_reply

    fenced = '```json\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n```'
    got = settle_reply(AgentReply(fenced, prompt_tokens=5), TOOLS)
    assert got.content == "" and got.tool_calls == [{"id": "", "name": "exec_command", "arguments": '{"cmd": "ls"}'}]
    assert got.prompt_tokens == 5  # usage kept
    real = {"id": "c1", "name": "exec_command", "arguments": '{"cmd": "pwd"}}'}
    kept = settle_reply(AgentReply(fenced, [real]), TOOLS)
    assert kept.content == fenced and kept.tool_calls == [dict(real, arguments='{"cmd": "pwd"}')]
    assert settle_reply(AgentReply(fenced), []).tool_calls == []  # no tools offered: text stays text
