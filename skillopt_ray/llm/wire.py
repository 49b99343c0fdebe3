"""The LLM layer's own wire shapes, as TypedDicts: request bodies, what the response cache keys and keeps, the
agent API's flat tool calls and a role's agent settings. The messages, tools and response formats they carry are the
benchmarks' contract's (skillopt_envs.chat), shared with every benchmark.
"""

from __future__ import annotations

from typing import Any, Optional, TypedDict, Union, cast

from skillopt_envs.chat import ChatMessage, ResponseFormat, ToolCall, ToolSpec
from skillopt_envs.jsontypes import JSONObject


class FlatToolCall(TypedDict):
    """A tool call as the agent API hands it to an agent CLI: {id, name, arguments (JSON text)}."""

    id: str
    name: str
    arguments: str


class AnthropicTurn(TypedDict):
    """One Messages API turn: a role and its content blocks (text, image, tool_use, tool_result)."""

    role: str
    content: list[JSONObject]


class ChatBody(TypedDict, total=False):
    """A Chat Completions request body as RoleEndpoint.request_kwargs builds it (also the response cache's key for
    chat calls). `extra_body` holds fields outside the OpenAI parameters (a server's reasoning switch)."""

    model: str
    messages: list[ChatMessage]
    temperature: float
    max_tokens: int
    max_completion_tokens: int
    reasoning_effort: str
    response_format: ResponseFormat
    tools: list[ToolSpec]
    tool_choice: Union[str, JSONObject]
    extra_body: JSONObject
    # the Anthropic endpoint's translation, carried along so its body is built once (never sent as such)
    _turns: list[AnthropicTurn]
    _system: str


class CachePayload(TypedDict, total=False):
    """What a call's response-cache key is the hash of: the endpoint, the request as sent and the sample key.
    Optional keys appear only when they apply, so keys recorded before a key existed stay valid."""

    agent: bool  # an agent CLI's call (llm/agent_calls.py)
    provider: str
    model: str
    messages: list[ChatMessage]
    temperature: Optional[float]
    max_tokens: Optional[int]
    max_completion_tokens: int
    reasoning_effort: Optional[str]
    response_format: Optional[ResponseFormat]
    tools: Optional[list[ToolSpec]]
    tool_choice: Union[str, JSONObject]
    extra_body: JSONObject
    api: str  # "responses"; chat keys carry none
    reasoning_summary: str
    sample_key: str


class CachedReply(TypedDict, total=False):
    """A chat call's usable reply as the response cache stores it."""

    content: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    tool_calls: list[ToolCall]
    reasoning_summary: str


class CachedAgentReply(TypedDict, total=False):
    """An agent call's reply as the response cache stores it (its tool calls flat, as the agent API hands them)."""

    content: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    tool_calls: list[FlatToolCall]


class AgentOptions(TypedDict, total=False):
    """A role's `agent` settings (skillopt_ray/config/schema.py AgentConfig, as a dict)."""

    prefix: Optional[str]
    timeout_s: float
    memory_mb: int
    empty_retries: int
    codex_sandbox: str
    codex_reasoning_effort: str
    claude_effort: str
    claude_max_thinking_tokens: int
    trace_to_optimizer: bool
    jail: str
    processes: int
    disk_mb: int
    disk_files: int
    file_mb: int
    tmp_mb: int


class AgentSettings(TypedDict):
    """A role's harness (chat | codex | claude_code), model and agent settings; key names only, no secrets."""

    harness: str
    model: str
    agent: AgentOptions


def agent_settings(role_cfg: Any) -> AgentSettings:
    """What a benchmark needs to run a role's episodes in an agent harness (no secrets: key names only)."""
    from dataclasses import asdict

    agent = getattr(role_cfg, "agent", None)
    return {
        "harness": getattr(role_cfg, "harness", "chat"),
        "model": role_cfg.model,
        "agent": cast(AgentOptions, asdict(agent)) if agent is not None else {},
    }
