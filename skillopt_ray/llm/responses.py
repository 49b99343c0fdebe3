"""A role served by OpenAI's Responses API (`llm.<role>.api=responses`, or `auto` for the models the reference
sends there), through the same RoleEndpoint machinery as Chat Completions: retries, the silence probe and the
transport-fault checks are the parent's; only the request body and the reply's reading differ.

The gateway still builds chat-shaped requests (messages, tools, response_format); they are translated here at
the last moment, and a Responses reply is read back into the same `Completion` the chat path returns (text, tool
calls in the chat shape, finish reason, usage), so benchmarks and optimizer stages never see which API answered.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Optional

from skillopt_envs.chat import ChatMessage, ResponseFormat, ToolCall, ToolSpec
from skillopt_envs.jsontypes import JSONObject, as_int, as_object

from skillopt_ray.llm.client import Completion, RoleEndpoint, TransportFault, decode_json_body, read_body, snippet
from skillopt_ray.llm.wire import ChatBody

# --- request: chat-shaped keyword arguments -> a Responses body --------------------------------------------------


def _input_part(part: Any, role: str) -> JSONObject:
    """One chat content part as a Responses content part (assistant text is output text)."""
    if isinstance(part, dict) and part.get("type") in ("image_url", "input_image"):
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        detail = image.get("detail") if isinstance(image, dict) else part.get("detail")
        return {"type": "input_image", "image_url": str(url or ""), "detail": detail or "auto"}
    text = part.get("text") if isinstance(part, dict) else part
    return {"type": "output_text" if role == "assistant" else "input_text", "text": str(text or "")}


def _message_item(role: str, content: Any) -> Optional[JSONObject]:
    """A chat message's text or parts as one input message item (None for an empty assistant turn)."""
    if isinstance(content, list):
        return {"role": role, "content": [_input_part(p, role) for p in content]}
    text = "" if content is None else str(content)
    if role == "assistant" and not text:
        return None
    return {"role": role, "content": text}


def to_input(messages: list[ChatMessage]) -> list[JSONObject]:
    """Chat messages as Responses input items: messages keep their role; an assistant's tool calls become
    function_call items and tool results function_call_output items, paired by the call id."""
    items: list[JSONObject] = []
    for m in messages:
        role = str(m.get("role") or "user")
        if role == "tool":
            out = m.get("content")
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(m.get("tool_call_id") or ""),
                    "output": out if isinstance(out, str) else json.dumps(out, ensure_ascii=False),
                }
            )
            continue
        item = _message_item(role, m.get("content"))
        if item is not None:
            items.append(item)
        for call in m.get("tool_calls") or [] if role == "assistant" else []:
            fn: dict[str, object] = dict(call.get("function") or {})
            args = fn.get("arguments")
            items.append(
                {
                    "type": "function_call",
                    "call_id": str(call.get("id") or ""),
                    "name": str(fn.get("name") or ""),
                    "arguments": args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False),
                }
            )
    return items


def to_tools(tools: list[ToolSpec]) -> list[JSONObject]:
    """Chat function tools as Responses function tools. `strict` is sent false: the Responses API defaults it to
    true, which would refuse the optional parameters the benchmarks' tool schemas have (chat's default is false)."""
    out = []
    for t in tools:
        # a tool may come flat, in the Responses shape ({type, name, parameters}), when it has no `function`
        fn: Mapping[str, Any] = t["function"] if isinstance(t.get("function"), dict) else t
        tool: JSONObject = {"type": "function", "name": fn.get("name"), "strict": bool(fn.get("strict", False))}
        tool["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
        if fn.get("description"):
            tool["description"] = fn["description"]
        out.append(tool)
    return out


def to_tool_choice(choice: Any) -> Any:
    """auto | none | required as they are; a named chat function choice in the Responses shape."""
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    return choice or "auto"


def to_text_format(response_format: Optional[ResponseFormat]) -> Optional[JSONObject]:
    """Chat's response_format as the Responses `text.format` (None: free text)."""
    if not response_format:
        return None
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        fmt: JSONObject = {
            "type": "json_schema",
            "name": spec.get("name") or "reply",
            "schema": spec.get("schema") or {},
        }
        if "strict" in spec:
            fmt["strict"] = spec["strict"]
        return fmt
    return {"type": str(response_format.get("type") or "text")}


def request_body(kw: ChatBody, reasoning_summary: Optional[str] = None) -> JSONObject:
    """The Responses request for the chat-shaped keyword arguments RoleEndpoint.request_kwargs builds: the budget
    goes as max_output_tokens, the effort (and summary) under `reasoning`, the JSON format under `text.format`.
    Nothing is stored server-side: every request carries its whole conversation, as a chat request does."""
    body: JSONObject = {"model": kw["model"], "input": to_input(kw["messages"]), "store": False}
    body["max_output_tokens"] = kw.get("max_completion_tokens", kw.get("max_tokens"))
    if kw.get("temperature") is not None:
        body["temperature"] = kw["temperature"]
    reasoning = {k: v for k, v in (("effort", kw.get("reasoning_effort")), ("summary", reasoning_summary)) if v}
    if reasoning:
        body["reasoning"] = reasoning
    fmt = to_text_format(kw.get("response_format"))
    if fmt is not None:
        body["text"] = {"format": fmt}
    if kw.get("tools"):
        body["tools"] = to_tools(kw["tools"])
        body["tool_choice"] = to_tool_choice(kw.get("tool_choice"))
    return body


# --- reply: a Responses body -> Completion -----------------------------------------------------------------------


def _finish_reason(data: JSONObject, calls: list[ToolCall]) -> str:
    """Chat's finish_reason for a response's status: a reply cut by the budget is `length`, as in chat."""
    if data.get("status") == "incomplete":
        details = data.get("incomplete_details")
        reason = str(details.get("reason") or "") if isinstance(details, dict) else ""
        return {"max_output_tokens": "length", "content_filter": "content_filter"}.get(reason, reason or "length")
    return "tool_calls" if calls else "stop"


def _read_output(output: Any) -> tuple[str, list[ToolCall], str]:
    """(text, tool calls in the chat shape, reasoning summary) of a response's output items."""
    text: list[str] = []
    calls: list[ToolCall] = []
    summary: list[str] = []
    for item in output if isinstance(output, list) else []:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            text += [str(p.get("text") or "") for p in item.get("content") or [] if p.get("type") == "output_text"]
        elif kind == "function_call":
            args = item.get("arguments")
            calls.append(
                {
                    "id": str(item.get("call_id") or item.get("id") or f"call_{len(calls)}"),
                    "type": "function",
                    "function": {
                        "name": str(item.get("name") or ""),
                        "arguments": args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False),
                    },
                }
            )
        elif kind == "reasoning":
            summary += [str(s.get("text") or "") for s in item.get("summary") or [] if isinstance(s, dict)]
    return "".join(text), calls, "\n\n".join(s for s in summary if s)


def _detail(usage: JSONObject, group: str, key: str) -> int:
    return as_int(as_object(usage.get(group)).get(key))


def parse_response(body: str, content_type: str) -> Completion:
    """The Completion in an HTTP 200 Responses body, or the TransportFault that describes what came instead."""
    data = decode_json_body(body, content_type)
    if not isinstance(data, dict) or not isinstance(data.get("output"), list):
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            msg = snippet(str(data["error"].get("message") or data["error"]), 120)
            raise TransportFault("not_completion", f"HTTP 200 carrying an error object: {msg!r}")
        raise TransportFault("not_completion", "HTTP 200 with JSON that is not a Responses reply (no output list)")
    if data.get("status") == "failed":
        err = data.get("error") if isinstance(data.get("error"), dict) else {}
        raise TransportFault("not_completion", f"HTTP 200 with a failed response: {snippet(str(err), 120)!r}")
    text, calls, summary = _read_output(data["output"])
    raw_usage = data.get("usage")
    usage = as_object(raw_usage)
    return Completion(
        content=text,
        finish_reason=_finish_reason(data, calls),
        prompt_tokens=as_int(usage.get("input_tokens")),
        completion_tokens=as_int(usage.get("output_tokens")),
        tool_calls=calls,
        reasoning_tokens=_detail(usage, "output_tokens_details", "reasoning_tokens"),
        cached_tokens=_detail(usage, "input_tokens_details", "cached_tokens"),
        reasoning_summary=summary,
    )


class ResponsesEndpoint(RoleEndpoint):
    """Sends one role's calls to `POST /responses` (the SDK's `client.responses.create`), Azure's included: the
    Azure client puts it under /openai/responses with the configured api-version."""

    api = "responses"

    def probe_request(self) -> tuple[str, JSONObject]:
        """The liveness probe on this route: an `input` that is neither text nor a list, refused before any work."""
        return "/responses", {"model": self.cfg.model, "input": 0, "max_output_tokens": 16}

    async def _post(self, kw: ChatBody, headers: dict[str, str]) -> Completion:
        body = request_body(kw, self.cfg.reasoning_summary)
        # the streaming response: its body is read here, so a 200 cut off half-way is counted as a billed reply
        async with self.client.responses.with_streaming_response.create(**body, extra_headers=headers or None) as raw:
            self._last_answer = time.monotonic()
            http = raw.http_response
            return parse_response(await read_body(http, self.cfg.timeout_s), http.headers.get("content-type", ""))
