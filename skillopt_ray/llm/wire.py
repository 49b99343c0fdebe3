"""The chat-completions shapes the LLM layer sends and reads, as TypedDicts.

Every endpoint (Chat Completions, Responses, Anthropic Messages, the agent CLIs' own APIs) is translated to and
from these shapes, so benchmarks, optimizer stages and the gateway see one vocabulary. Keys are optional
(total=False) where the wire omits them: a system message has no tool calls, a tool message no role-specific
extras. Tool parameter schemas and `response_format` schemas are arbitrary JSON Schema, typed as JSON values.
"""

from __future__ import annotations

from typing import Optional, TypedDict, Union

from skillopt_envs.jsontypes import JSONObject


class ImageURL(TypedDict, total=False):
    url: str
    detail: str  # auto | low | high


class ContentPart(TypedDict, total=False):
    """One part of a message's content: {type: text, text} or {type: image_url, image_url: {url, detail}}."""

    type: str
    text: str
    image_url: ImageURL


# a message's content: plain text, content parts (text and images), or None (an assistant turn of tool calls only)
MessageContent = Union[str, list[ContentPart], None]


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text, as the API sends it


class ToolCall(TypedDict):
    """A tool call as Chat Completions sends it: {id, type: "function", function: {name, arguments}}."""

    id: str
    type: str
    function: FunctionCall


class FlatToolCall(TypedDict):
    """A tool call as the agent API hands it to an agent CLI: {id, name, arguments (JSON text)}."""

    id: str
    name: str
    arguments: str


class ChatMessage(TypedDict, total=False):
    """One chat message. `_closed` marks, while an agent request is translated, a turn that takes no more tool
    calls; it is removed before the message is sent."""

    role: str  # system | user | assistant | tool
    content: MessageContent
    tool_calls: list[ToolCall]
    tool_call_id: str
    name: str
    _closed: bool


class FunctionSpec(TypedDict, total=False):
    name: str
    description: str
    parameters: JSONObject  # a JSON Schema object
    strict: bool


class ToolSpec(TypedDict):
    """A function tool offered to the model (Chat Completions `tools` entry)."""

    type: str  # "function"
    function: FunctionSpec


class JsonSchemaSpec(TypedDict, total=False):
    name: str
    schema: JSONObject
    strict: bool


class ResponseFormat(TypedDict, total=False):
    """Chat's `response_format`: {type: json_object} or {type: json_schema, json_schema: {name, schema, strict}}."""

    type: str
    json_schema: JsonSchemaSpec


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
