"""The typed records of the LLM layer, the harness, the sleep pipeline and the benchmarks hold what is really written.

A TypedDict only helps while its keys are the keys the code writes: each test builds a record the way the product
does (the ledger's journal, the request body, the agent API's translations, the config sections) and checks its
keys against the declared ones, so a key added on one side and not the other fails here.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from skillopt_envs.base import EnvSettings
from skillopt_envs.chat import ChatMessage, ChatRequest, ContentPart, FunctionCall, ToolCall, ToolSpec
from skillopt_envs.livemathematicianbench.data import Choice, coerce_choices, coerce_correct
from skillopt_envs.livemathematicianbench.shuffle import shuffle_choices

from skillopt_ray.config.schema import AgentConfig, BudgetConfig, EnvConfig, LLMRoleConfig
from skillopt_ray.llm.agent_api import (
    AgentReply,
    MessageObject,
    message_object,
    messages_to_chat,
    responses_to_chat,
)
from skillopt_ray.llm.anthropic_backend import to_messages
from skillopt_ray.llm.client import RetryPolicy, RoleEndpoint, parse_completion
from skillopt_ray.llm.ledger import JournalLine, Ledger, LedgerEntry
from skillopt_ray.llm.wire import AgentOptions, AgentSettings, AnthropicTurn, ChatBody, agent_settings
from skillopt_ray.sleep.harvest.tasks import MinedTask, RuleCheck, TaskMetadata, valid_check
from skillopt_ray.sleep.proposal.staging import ManifestRow, live_row


def keys(td: Any) -> set[str]:
    return set(td.__annotations__)


def test_journal_lines_have_only_declared_keys(tmp_path: Path) -> None:
    journal = tmp_path / "ledger.journal.jsonl"
    ledger = Ledger({}, BudgetConfig(), journal=str(journal))
    call = ledger.begin("target", "rollout", "m", 100, 50)
    ledger.record("target", "rollout", "m", 90, 40, call=call)
    cancelled = ledger.begin("optimizer", "merge", "m", 10, 5)
    ledger.settle(cancelled)
    ledger.record_hit("target", "rollout")
    ledger.close()
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert len(lines) == 5
    for line in lines:
        assert set(line) <= keys(JournalLine), line
        if "v" in line:
            assert set(line["v"]) == {f.name for f in fields(LedgerEntry)}
    assert {"p", "k", "m", "pe", "ce", "t"} == set(lines[0])
    assert lines[1]["d"] == call and lines[3] == {"d": cancelled, "t": lines[3]["t"]}


def _endpoint(**kw: Any) -> RoleEndpoint:
    role = LLMRoleConfig(base_url="http://127.0.0.1:9/v1", model="m", **kw)
    return RoleEndpoint("target", role, RetryPolicy(0, 1, 1, 10))


def test_request_body_has_only_chat_body_keys() -> None:
    tool: ToolSpec = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    req = ChatRequest(
        "target",
        "rollout",
        [{"role": "user", "content": "hi"}],
        response_format={"type": "json_object"},
        temperature=0.0,
        tools=[tool],
    )
    body = _endpoint(reasoning_effort="low", thinking="enabled", thinking_wire="minimax").request_kwargs(req)
    assert set(body) <= keys(ChatBody)
    assert set(body) == {"model", "messages", "temperature", "max_tokens", "response_format", "tools", "tool_choice",
                         "extra_body"}  # fmt: skip
    assert body["messages"] == req.messages


def test_parsed_tool_calls_have_exactly_the_declared_keys() -> None:
    raw = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {"content": None, "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    comp = parse_completion(json.dumps(raw), "application/json")
    (call,) = comp.tool_calls
    assert set(call) == keys(ToolCall)
    assert set(call["function"]) == keys(FunctionCall)
    assert json.loads(call["function"]["arguments"]) == {"a": 1}


def _check_messages(messages: list[ChatMessage]) -> None:
    for m in messages:
        assert set(m) <= keys(ChatMessage) - {"_closed"}, m  # the translation marks never reach the model
        for call in m.get("tool_calls") or []:
            assert set(call) == keys(ToolCall) and set(call["function"]) == keys(FunctionCall)
        content = m.get("content")
        for part in content if isinstance(content, list) else []:
            assert set(part) <= keys(ContentPart)


def test_responses_request_becomes_declared_chat_shapes() -> None:
    body = {
        "instructions": "be brief",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd": "ls"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** patch"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"},
        ],
        "tools": [
            {"type": "function", "name": "shell", "parameters": {"type": "object"}},
            {"type": "custom", "name": "apply_patch"},
        ],
    }
    messages, tools, custom = responses_to_chat(body)
    _check_messages(messages)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert all(set(t) == keys(ToolSpec) for t in tools) and custom == {"apply_patch"}


def test_messages_request_and_reply_have_declared_shapes() -> None:
    body = {
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"c": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]},
        ],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    }
    messages, tools = messages_to_chat(body)
    _check_messages(messages)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert all(set(t) == keys(ToolSpec) for t in tools)
    reply = AgentReply("ok", [{"id": "t2", "name": "Bash", "arguments": '{"c": "pwd"}'}], 5, 3)
    msg = message_object(reply, "msg_1", "m")
    assert set(msg) == keys(MessageObject)
    assert [b["type"] for b in msg["content"]] == ["text", "tool_use"]


def test_anthropic_turns_have_the_declared_keys() -> None:
    system, turns = to_messages(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {"role": "user", "content": [{"type": "text", "text": "more"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "r"},
        ]
    )  # fmt: skip
    assert system == "s"
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]  # the two user turns merged
    assert all(set(t) == keys(AnthropicTurn) for t in turns)


def test_config_sections_match_their_typed_dicts() -> None:
    """The settings the gateway hands the harness, and the env section a benchmark gets, are config dataclasses as
    dicts: a field added to the config must be declared in the TypedDict too."""
    assert keys(AgentOptions) == {f.name for f in fields(AgentConfig)}
    assert keys(EnvSettings) == {f.name for f in fields(EnvConfig)}
    role = LLMRoleConfig(model="m")
    role.harness = "codex"
    role.agent = AgentConfig()
    settings = agent_settings(role)
    assert set(settings) == keys(AgentSettings)
    assert set(settings["agent"]) == keys(AgentOptions)


def test_sleep_records_have_the_declared_keys(tmp_path: Path) -> None:
    check = valid_check({"op": "contains", "arg": " done ", "extra": 1})
    count = valid_check({"op": "max_chars", "arg": 500})
    assert check == {"op": "contains", "arg": "done"} and count == {"op": "max_chars", "arg": 500}
    assert valid_check({"op": "max_chars", "arg": True}) is None
    assert set(check) == keys(RuleCheck)
    task = MinedTask("write a haiku", "chat", checks=[check])
    assert set(task.metadata()) == keys(TaskMetadata)
    live = tmp_path / "SKILL.md"
    row = live_row("skill", "skill/SKILL.md", b"x", live, str(tmp_path))
    assert set(row) == keys(ManifestRow) and row["live_sha256"] == "absent"


def test_livemath_choices_keep_their_shape_through_the_shuffle() -> None:
    choices = coerce_choices({"A": "one", "B": "two", "C": "three"})
    correct, choices = coerce_correct({"label": "B"}, choices)
    shuffled, new_correct = shuffle_choices("item", choices, correct, seed=3)
    for c in [*shuffled, new_correct]:
        assert set(c) == keys(Choice)
    assert new_correct["text"] == "two"
    assert {c["label"] for c in shuffled} == {"A", "B", "C"}
    assert choices[0] is not shuffled[0]  # the shuffle copies, never relabels the caller's choices


def test_ledger_reads_its_own_state(tmp_path: Path) -> None:
    ledger = Ledger({}, BudgetConfig())
    ledger.record("target", "rollout", "m", 10, 5)
    again = Ledger({}, BudgetConfig(), state=json.loads(json.dumps(ledger.to_dict())))
    assert again.entries["target/rollout"].prompt_tokens == 10


def test_agent_info_over_turns_adds_up_and_keeps_declared_keys() -> None:
    from skillopt_envs.base import AgentInfo, AgentOutcome
    from skillopt_envs.kit import agent_turns_info

    one: AgentInfo = {
        "agent_summary": "a", "agent_attempts": 1, "agent_calls": 2, "agent_tokens": [10, 5],
        "agent_reported_tokens": [9, 4], "agent_cost_usd": 0.5, "agent_wall_s": 1.25, "agent_first_call_s": 0.1,
        "analyst_blocks": [], "usage_warning": "w1",
    }  # fmt: skip
    two: AgentInfo = {**one, "agent_summary": "b", "agent_first_call_s": 0.3, "usage_warning": "w2"}
    info = agent_turns_info(
        [AgentOutcome("r", "s", info=one, trace="t1"), AgentOutcome("r", "s", info=two, trace="t2")]
    )
    assert set(info) <= keys(AgentInfo)
    assert list(info)[:6] == [
        "agent_summary", "agent_attempts", "agent_calls", "agent_cost_usd", "agent_tokens", "agent_reported_tokens",
    ]  # fmt: skip
    assert info["agent_summary"].count("TURN BREAK") == 1
    assert info["agent_calls"] == 4 and info["agent_tokens"] == [20, 10] and info["agent_reported_tokens"] == [18, 8]
    assert info["agent_cost_usd"] == 1.0 and info["agent_wall_s"] == 2.5 and info["agent_first_call_s"] == 0.1
    assert info["agent_turns"] == 2 and info["usage_warning"] == "w1; w2"
    assert info["analyst_blocks"] == [["Agent Trace Summary", "t1" + info["agent_summary"][1:-1] + "t2"]]
