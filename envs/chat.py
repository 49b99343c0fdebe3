"""The chat vocabulary between a benchmark and the model handle it is given: the message shapes (Chat Completions'
own, as TypedDicts), the request record a handle takes and the replies it returns, and the tolerant reader of JSON
in a reply.

The LLM layer translates every endpoint (Chat Completions, Responses, Anthropic Messages, the agent CLIs' APIs) to
and from these shapes, so benchmarks, the optimizer's stages and the gateway see one vocabulary. It lives in the
benchmarks' contract so that a benchmark builds its requests without importing the engine. Keys are optional
(total=False) where the wire omits them: a system message has no tool calls, a tool message no role-specific
extras. Tool parameter schemas and `response_format` schemas are arbitrary JSON Schema, typed as JSON values.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict, Union

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


# ---------- the request record ----------


@dataclass(frozen=True)
class ChatRequest:
    role: str  # "target" | "optimizer"
    stage: str  # rollout, analyst, merge, ranking, rewrite, slow_update, meta_skill, ...
    # content is a string, or a list of OpenAI content parts ({type: text, text} / {type: image_url, image_url: {url}})
    messages: list[ChatMessage]
    key: str = ""  # sample key: keeps repeated samples distinct in the cache
    response_format: Optional[ResponseFormat] = None
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    # OpenAI function tools offered to the model (Chat Completions `tools`), and `tool_choice` ("auto", ...)
    tools: Optional[list[ToolSpec]] = None
    tool_choice: Optional[str] = None

    def prompt_chars(self) -> int:
        """The prompt's size in characters for estimates (rate limits): text as is, an image part as IMAGE_PART_CHARS."""
        return sum(len(content_text(m.get("content"), IMAGE_PART_CHARS * "x")) for m in self.messages)


# an image counts about 1,000 tokens (OpenAI's high-detail tile count for a page-sized image), 4 characters each
IMAGE_PART_CHARS = 4000


IMAGE_PART_TYPES = ("image_url", "input_image", "image")  # Chat Completions', Responses' and Messages' image parts


def content_text(content: object, image: str = "[image]") -> str:
    """A message's content as text: a string as it is; content parts as their texts (a text part of any API, a
    Messages tool result's own content), each image as `image` (left out when `image` is ""); other object parts
    are left out. One reader for chat content and for the Responses/Messages content the agent endpoint receives."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict):
                out.append(str(part))
            elif "text" in part:
                out.append(str(part.get("text") or ""))
            elif part.get("type") == "tool_result":
                out.append(content_text(part.get("content"), image))
            elif part.get("type") in IMAGE_PART_TYPES and image:
                out.append(image)
        return "\n".join(out)
    return str(content)


# ---------- the replies ----------


@dataclass
class ChatResult:
    content: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    finish_reason: str = ""
    # the reply's tool calls as the API sends them: [{id, type: "function", function: {name, arguments}}]
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning_summary: str = ""  # the model's summary of its reasoning (Responses API, llm.<role>.reasoning_summary)


@dataclass
class JsonResult:
    data: Any
    raw: str
    reasked: bool = False
    errors: list[str] = field(default_factory=list)


# ---------- JSON in a reply ----------

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


class JsonExtractionError(ValueError):
    pass


def extract_json(text: str) -> Any:
    """Parse the first JSON object/array found in a reply."""
    cleaned = _THINK.sub("", text or "").strip()
    candidates = [m.group(1).strip() for m in _FENCE.finditer(cleaned)] + [cleaned]
    decoder = json.JSONDecoder()
    for cand in candidates:
        try:
            return json.loads(cand)
        except json.JSONDecodeError:
            pass
        for i, ch in enumerate(cand):
            if ch in "{[":
                try:
                    obj, _ = decoder.raw_decode(cand[i:])
                    return obj
                except json.JSONDecodeError:
                    continue
    raise JsonExtractionError("no JSON object found in the reply")
