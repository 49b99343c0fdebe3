"""The model endpoint an agent CLI talks to: OpenAI Responses (Codex) and Anthropic Messages (Claude Code).

Each agent episode gets its own small HTTP server on a Unix socket (bind-mounted into the agent's jail). It
translates every request into a chat-completions request with tools and sends it through the project's LLM
gateway (`agent_chat`), so the ledger, budgets, rate limits, retries, response cache and offline replay
hold for agent calls as for chat calls; the reply goes back to the CLI as the streaming events it expects.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict, Union, cast

from aiohttp import web
from skillopt_envs.chat import ChatMessage, ChatRequest, ContentPart, FunctionSpec, ToolCall, ToolSpec, content_text
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.llm.toolcall_text import settle_reply
from skillopt_ray.llm.types import LLMError
from skillopt_ray.llm.wire import FlatToolCall


@dataclass(frozen=True)
class AgentRequest(ChatRequest):
    """A chat request that may offer tools (chat-completions shape) to the model."""

    tools: Optional[list[ToolSpec]] = None
    tool_choice: Optional[Any] = None


@dataclass
class AgentReply:
    content: str
    tool_calls: list[FlatToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    finish_reason: str = ""
    cost_usd: float = 0.0  # what the ledger charged for this call (0 for a cache hit)


def _parts(content: Any) -> Union[str, list[ContentPart]]:
    """Responses/Messages content parts as chat content: plain text when there is no image."""
    if not isinstance(content, list):
        return content_text(content, image="")
    parts: list[ContentPart] = []
    for p in content:
        if not isinstance(p, dict):
            continue
        t = p.get("type")
        if t in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(p.get("text") or "")})
        elif t == "input_image" and p.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": p["image_url"]}})
        elif t == "image" and isinstance(p.get("source"), dict) and p["source"].get("type") == "base64":
            src = p["source"]
            parts.append(
                {"type": "image_url", "image_url": {"url": f"data:{src.get('media_type')};base64,{src.get('data')}"}}
            )
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _images_of(content: Any) -> list[ContentPart]:
    """The image parts (as chat image_url parts) of a tool output's content, e.g. Claude Code's Read of a PNG."""
    parts = _parts(content) if isinstance(content, list) else None
    return [p for p in parts if p["type"] == "image_url"] if isinstance(parts, list) else []


# chat tool messages carry text only: images a tool returned follow the turn's tool messages as a user message
TOOL_IMAGES_TEXT = "The tool calls above returned these images:"
NO_TEXT = "[an image: it follows in the next message]"


def _flush_images(out: list[ChatMessage], images: list[ContentPart]) -> None:
    if images:
        out.append({"role": "user", "content": [{"type": "text", "text": TOOL_IMAGES_TEXT}, *images], "_closed": True})
        images.clear()


def _merge_system(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Adjacent system messages joined into one (many chat templates allow only one at a time)."""
    out: list[ChatMessage] = []
    for m in messages:
        if (
            out
            and m["role"] == "system"
            and out[-1]["role"] == "system"
            and isinstance(m["content"], str)
            and isinstance(out[-1]["content"], str)
        ):
            out[-1] = {"role": "system", "content": out[-1]["content"] + "\n\n" + m["content"]}
        else:
            out.append(m)
    return out


def _add_call(out: list[ChatMessage], call: ToolCall) -> None:
    """Append a tool call to the last assistant message if it is the turn being built, else start one."""
    if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
        out[-1]["tool_calls"].append(call)
    elif out and out[-1]["role"] == "assistant" and not out[-1].get("_closed"):
        out[-1]["tool_calls"] = [call]
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _clean(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The messages as sent: without the `_closed` marks of the translation."""
    out = []
    for m in messages:
        sent = m.copy()
        sent.pop("_closed", None)
        out.append(sent)
    return _merge_system(out)


# ---------- OpenAI Responses (Codex) ----------

CUSTOM_TOOL_PARAMS: JSONObject = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


def responses_to_chat(body: dict[str, Any]) -> tuple[list[ChatMessage], list[ToolSpec], set[str]]:
    """(chat messages, chat tools, names of freeform tools) of a Responses request. Item ids are dropped: they are
    random per run and would keep a replayed run from finding its recorded replies."""
    out: list[ChatMessage] = []
    if body.get("instructions"):
        out.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    images: list[ContentPart] = []
    for it in items or []:
        t = it.get("type", "message")
        if t not in ("function_call_output", "custom_tool_call_output"):
            _flush_images(out, images)
        if t == "message":
            role = {"developer": "system", "system": "system"}.get(it.get("role"), it.get("role") or "user")
            out.append({"role": role, "content": _parts(it.get("content"))})
        elif t in ("function_call", "custom_tool_call"):
            args = it.get("arguments") if t == "function_call" else json.dumps({"input": it.get("input", "")})
            _add_call(
                out,
                {
                    "id": it.get("call_id"),
                    "type": "function",
                    "function": {"name": it.get("name"), "arguments": args or "{}"},
                },
            )
        elif t in ("function_call_output", "custom_tool_call_output"):
            shown = _images_of(it.get("output"))
            text = content_text(it.get("output"), image="") or (NO_TEXT if shown else "")
            out.append({"role": "tool", "tool_call_id": it.get("call_id"), "content": text})
            images += shown
    _flush_images(out, images)
    tools: list[ToolSpec] = []
    custom: set[str] = set()
    for tl in body.get("tools") or []:
        if tl.get("type") == "function":
            fn: FunctionSpec = {
                "name": tl["name"],
                "description": tl.get("description", ""),
                "parameters": tl.get("parameters") or {"type": "object", "properties": {}},
            }
            tools.append({"type": "function", "function": fn})
        elif tl.get("type") == "custom":
            custom.add(tl["name"])
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": tl["name"],
                        "description": tl.get("description", ""),
                        "parameters": CUSTOM_TOOL_PARAMS,
                    },
                }
            )
    return _clean(out), tools, custom


def _sse(event: str, data: Mapping[str, object]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def responses_events(reply: AgentReply, rid: str, model: str, custom: set[str]) -> list[bytes]:
    """The Responses stream for one reply: created, the output items, completed (with usage)."""
    ev = [
        _sse(
            "response.created",
            {
                "type": "response.created",
                "response": {"id": rid, "object": "response", "status": "in_progress", "model": model, "output": []},
            },
        )
    ]
    output: list[JSONObject] = []
    if reply.content:
        item = _output_message(reply.content, rid)
        ev += _output_message_events(item, reply.content)
        output.append(item)
    for call in reply.tool_calls:
        item = _output_tool_call(call, custom)
        ev.append(
            _sse(
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": len(output), "item": item},
            )
        )
        output.append(item)
    ev.append(_response_completed(reply, rid, model, output))
    return ev


def _output_message(text: str, rid: str) -> JSONObject:
    """The reply's text as a completed Responses message item."""
    return {
        "type": "message",
        "id": f"msg_{rid}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _output_message_events(item: JSONObject, text: str) -> list[bytes]:
    """The message item streamed as the first output: added (empty), its text in one delta, done."""
    return [
        _sse(
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "content": []},
            },
        ),
        _sse(
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": text,
            },
        ),
        _sse("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
    ]


def _output_tool_call(call: FlatToolCall, custom: set[str]) -> JSONObject:
    """A chat tool call as a Responses item: a custom tool's call carries its raw input text (the `input` the
    chat side wrapped it in), any other a function call with its JSON arguments."""
    if call["name"] in custom:
        try:
            text = json.loads(call["arguments"]).get("input", "")
        except (ValueError, AttributeError):
            text = call["arguments"]
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{call['id']}",
            "call_id": call["id"],
            "name": call["name"],
            "input": text,
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": f"fc_{call['id']}",
        "call_id": call["id"],
        "name": call["name"],
        "arguments": call["arguments"],
        "status": "completed",
    }


def _response_completed(reply: AgentReply, rid: str, model: str, output: list[JSONObject]) -> bytes:
    """The closing event: the whole response with its output items and the reply's token usage."""
    usage: JSONObject = {
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": reply.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }
    return _sse(
        "response.completed",
        {
            "type": "response.completed",
            "response": {
                "id": rid,
                "object": "response",
                "status": "completed",
                "model": model,
                "output": output,
                "usage": usage,
            },
        },
    )


# ---------- Anthropic Messages (Claude Code) ----------


def messages_to_chat(body: dict[str, Any]) -> tuple[list[ChatMessage], list[ToolSpec]]:
    """(chat messages, chat tools) of a Messages request. `role: "system"` entries inside `messages` are kept as
    system messages; the per-run billing line Claude Code puts first in `system` is dropped (it varies per run)."""
    out: list[ChatMessage] = []
    system = _system_text(body.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for m in body.get("messages") or []:
        role, content = m.get("role"), m.get("content")
        if isinstance(content, str) or role == "system":
            out.append({"role": role, "content": content_text(content, image=""), "_closed": True})
        elif role == "assistant":
            out.append(_assistant_message(content or []))
        else:
            _add_user_blocks(out, content or [])
    tools: list[ToolSpec] = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for t in body.get("tools") or []
        if t.get("name")
    ]
    return _clean(out), tools


def _system_text(system: Any) -> str:
    """The request's `system` as one text ("" when absent), its text blocks joined without the billing line."""
    if isinstance(system, list):
        system = "\n\n".join(
            str(b.get("text") or "")
            for b in system
            if isinstance(b, dict) and not str(b.get("text") or "").startswith("x-anthropic-billing-header")
        )
    return str(system) if system else ""


def _assistant_message(content: list[dict[str, Any]]) -> ChatMessage:
    """An assistant turn's blocks as one chat message: its text blocks joined, its tool_use blocks as calls."""
    text = "\n".join(str(b.get("text") or "") for b in content if b.get("type") == "text")
    # ids and names go on as the client sent them (strings, by the Messages API)
    calls: list[ToolCall] = [
        {
            "id": cast(str, b.get("id")),
            "type": "function",
            "function": {"name": cast(str, b.get("name")), "arguments": json.dumps(b.get("input") or {})},
        }
        for b in content
        if b.get("type") == "tool_use"
    ]
    msg: ChatMessage = {"role": "assistant", "content": text or None, "_closed": True}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _add_user_blocks(out: list[ChatMessage], content: list[dict[str, Any]]) -> None:
    """A user turn's blocks onto `out`: each tool_result as a tool message (marked when it is an error), the
    images they returned in one user message after them, then the other blocks as one user message."""
    rest = []
    images: list[ContentPart] = []
    for b in content:
        if b.get("type") == "tool_result":
            shown = _images_of(b.get("content"))
            text = content_text(b.get("content"), image="") or (NO_TEXT if shown else "")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": cast(str, b.get("tool_use_id")),
                    "content": ("[error] " if b.get("is_error") else "") + text,
                }
            )
            images += shown
        else:
            rest.append(b)
    _flush_images(out, images)
    if rest:
        out.append({"role": "user", "content": _parts(rest), "_closed": True})


def _tool_input(arguments: str) -> JSONObject:
    try:
        val = json.loads(arguments or "{}")
    except ValueError:
        return {"_raw": arguments}
    return val if isinstance(val, dict) else {"value": val}


def message_object(reply: AgentReply, mid: str, model: str) -> MessageObject:
    content: list[MessageBlock] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for c in reply.tool_calls:
        content.append({"type": "tool_use", "id": c["id"], "name": c["name"], "input": _tool_input(c["arguments"])})
    stop = "tool_use" if reply.tool_calls else ("max_tokens" if reply.finish_reason == "length" else "end_turn")
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens},
    }


class MessageBlock(TypedDict, total=False):
    """A content block of a Messages reply: {type: text, text} or {type: tool_use, id, name, input}."""

    type: str
    text: str
    id: str
    name: str
    input: JSONObject


class MessageObject(TypedDict):
    """A whole Messages API reply, as a non-streaming call gets it."""

    id: str
    type: str
    role: str
    model: str
    content: list[MessageBlock]
    stop_reason: Optional[str]
    stop_sequence: Optional[str]
    usage: dict[str, int]


class TranslatedRequest(TypedDict):
    """One agent call as the gateway was asked it (chat messages and tools)."""

    messages: list[ChatMessage]
    tools: list[ToolSpec]


def messages_events(reply: AgentReply, mid: str, model: str) -> list[bytes]:
    msg = message_object(reply, mid, model)
    start = {
        **msg,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": 0},
    }
    ev = [_sse("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            ev.append(
                _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                )
            )
            ev.append(
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}},
                )
            )
        else:
            ev.append(
                _sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
                    },
                )
            )
            ev.append(
                _sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                    },
                )
            )
        ev.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    ev.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": reply.completion_tokens},
            },
        )
    )
    ev.append(_sse("message_stop", {"type": "message_stop"}))
    return ev


# ---------- the per-episode server ----------


@dataclass
class CallRecord:
    """One model call an agent made, as the gateway answered it (for the episode's token reconciliation)."""

    protocol: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    tool_calls: list[str]
    error: str = ""
    cost_usd: float = 0.0
    text: str = ""  # the reply's text as the gateway answered it: what the agent last said, kept outside its jail


def call_id(key: str, n: int, i: int) -> str:
    """Deterministic tool-call ids, so a replayed episode sends the same requests as the recorded one."""
    return "call_" + hashlib.sha256(f"{key}|{n}|{i}".encode()).hexdigest()[:20]


MAX_KEPT_TEXT = 100_000  # of a reply's text, kept for the episode (a final answer, if the CLI never wrote it)
# model calls one episode may make: past it, an agent that calls tools in a loop gets a plain final message
MAX_AGENT_CALLS = 60
CALL_LIMIT_TEXT = "Stopped: this episode reached its limit of {n} model calls."


class AgentAPIServer:
    """Serves one agent episode on a Unix socket; every model call goes through `llm.agent_chat`."""

    def __init__(
        self, llm: Any, key: str, role: str = "target", stage: str = "rollout", max_calls: int = MAX_AGENT_CALLS
    ):
        self.llm = llm
        self.max_calls = max_calls
        self.key = key
        self.role = role
        self.stage = stage
        self.calls: list[CallRecord] = []
        self.errors: list[LLMError] = []  # what the gateway raised (the episode becomes an infra error)
        self.requests: list[TranslatedRequest] = []  # the translated chat requests, for tests and the trace
        self._runner: Optional[web.AppRunner] = None
        self.first_call_at: Optional[float] = None  # monotonic time of the agent's first model call

    async def start(self, socket_path: str) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/", self._ok)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        # the agent is gone when this stops: a call still in flight is not waited for
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.UnixSite(self._runner, socket_path).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    async def _count_tokens(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages, _ = messages_to_chat(body)
        return web.json_response({"input_tokens": max(1, len(json.dumps(messages)) // 4)})

    async def _call(self, protocol: str, messages: list[ChatMessage], tools: list[ToolSpec]) -> AgentReply:
        if self.first_call_at is None:
            self.first_call_at = time.monotonic()
        n = len(self.calls)
        if n >= self.max_calls:  # a tool loop: the CLI gets a final message, the model is not asked again
            return AgentReply(CALL_LIMIT_TEXT.format(n=self.max_calls), finish_reason="stop")
        self.requests.append({"messages": messages, "tools": tools})
        req = AgentRequest(
            self.role, self.stage, messages, self.key, tools=tools or None, tool_choice="auto" if tools else None
        )
        try:
            reply: AgentReply = await self.llm.agent_chat(req)
        except LLMError as e:
            self.errors.append(e)
            self.calls.append(CallRecord(protocol, 0, 0, False, [], error=e.message))
            raise
        reply = settle_reply(reply, tools)  # calls a small model wrote as text, broken arguments (toolcall_text)
        for i, c in enumerate(reply.tool_calls):  # ids the model gave may repeat across calls; ours do not
            c.setdefault("id", "")
            if not c["id"]:
                c["id"] = call_id(self.key, n, i)
        self.calls.append(
            CallRecord(
                protocol,
                reply.prompt_tokens,
                reply.completion_tokens,
                reply.cached,
                [c["name"] for c in reply.tool_calls],
                cost_usd=reply.cost_usd,
                text=reply.content[-MAX_KEPT_TEXT:],
            )
        )
        return reply

    @staticmethod
    def _error(status: int, message: str, anthropic: bool) -> web.Response:
        if anthropic:
            return web.json_response(
                {"type": "error", "error": {"type": "api_error", "message": message}}, status=status
            )
        return web.json_response({"error": {"type": "server_error", "message": message}}, status=status)

    async def _stream(self, request: web.Request, events: list[bytes]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for e in events:
            await resp.write(e)
        await resp.write_eof()
        return resp

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages, tools, custom = responses_to_chat(body)
        try:
            reply = await self._call("responses", messages, tools)
        except LLMError as e:
            return self._error(400, e.message, anthropic=False)
        rid = f"resp_{len(self.calls)}"
        events = responses_events(reply, rid, str(body.get("model") or ""), custom)
        if body.get("stream", False):
            return await self._stream(request, events)
        done = json.loads(events[-1].decode().split("data: ", 1)[1])
        return web.json_response(done["response"])

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages, tools = messages_to_chat(body)
        try:
            reply = await self._call("messages", messages, tools)
        except LLMError as e:
            return self._error(400, e.message, anthropic=True)
        mid = f"msg_{len(self.calls)}"
        if body.get("stream", False):
            return await self._stream(request, messages_events(reply, mid, str(body.get("model") or "")))
        return web.json_response(message_object(reply, mid, str(body.get("model") or "")))
