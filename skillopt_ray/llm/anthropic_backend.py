"""A role served by the Anthropic Messages API (`llm.<role>.provider=anthropic`), through the official
`anthropic` SDK over real HTTP, for either role.

Chat requests are translated to Messages (system text apart, tool results as `tool_result` blocks, data-URL
images as base64 image blocks) and the reply back to a chat completion (text, tool calls, usage, finish reason);
the SDK's own retries are off and the gateway's policy (backoff with jitter, Retry-After, the retry window)
applies, as for the OpenAI-compatible endpoints.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, Optional, TypedDict

from skillopt_envs.chat import ChatMessage, ChatRequest, ToolCall, ToolSpec
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.config import LLMRoleConfig
from skillopt_ray.llm.client import Completion, RetryPolicy
from skillopt_ray.llm.types import LLMConfigError, LLMRequestRejected, LLMUnavailable
from skillopt_ray.llm.wire import AnthropicTurn, ChatBody

# the efforts Claude takes (the Messages API's output_config.effort, as the reference's Claude backend passes
# them to the CLI); any other value (none, minimal) sends no effort, leaving the model's default
CLAUDE_EFFORTS = ("low", "medium", "high", "xhigh", "max")

STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def _blocks(content: Any) -> list[JSONObject]:
    if isinstance(content, str) or content is None:
        return [{"type": "text", "text": content or ""}]
    out: list[JSONObject] = []
    for p in content:
        if p.get("type") == "text":
            out.append({"type": "text", "text": p.get("text") or ""})
        elif p.get("type") == "image_url":
            url = str((p.get("image_url") or {}).get("url") or "")
            if url.startswith("data:") and ";base64," in url:
                mime, data = url[5:].split(";base64,", 1)
                out.append({"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}})
            else:
                out.append({"type": "image", "source": {"type": "url", "url": url}})
    return out


def to_messages(messages: list[ChatMessage]) -> tuple[str, list[AnthropicTurn]]:
    """(system text, Messages turns) of chat messages; consecutive turns of one role are merged, as the API wants."""
    system: list[str] = []
    turns: list[AnthropicTurn] = []

    def add(role: str, blocks: list[JSONObject]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})

    for m in messages:
        role = m.get("role")
        if role == "system":
            system.append(m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]))
        elif role == "tool":
            add(
                "user",
                [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": str(m.get("content") or "")}],
            )
        elif role == "assistant":
            blocks = [b for b in _blocks(m.get("content")) if b.get("text", True)]
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = {"_raw": fn.get("arguments")}
                blocks.append({"type": "tool_use", "id": c.get("id"), "name": fn.get("name"), "input": args})
            add("assistant", blocks or [{"type": "text", "text": ""}])
        else:
            add("user", _blocks(m.get("content")))
    return "\n\n".join(system), turns


def to_tools(tools: Optional[list[ToolSpec]]) -> list[JSONObject]:
    out: list[JSONObject] = []
    for t in tools or []:
        fn: Mapping[str, Any] = t.get("function") or t
        out.append({"name": fn["name"], "description": fn.get("description", ""),
                    "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}})  # fmt: skip
    return out


def from_message(data: dict[str, Any]) -> tuple[Completion, list[ToolCall]]:
    """A Messages reply as (completion, tool calls in the chat shape)."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for b in data.get("content") or []:
        if b.get("type") == "text":
            text.append(b.get("text") or "")
        elif b.get("type") == "tool_use":
            calls.append({"id": b.get("id"), "type": "function",
                          "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}})  # fmt: skip
    usage = data.get("usage") or {}
    stop = str(data.get("stop_reason") or "")
    comp = Completion("".join(text), STOP.get(stop, stop), int(usage.get("input_tokens") or 0),
                      int(usage.get("output_tokens") or 0), calls)  # fmt: skip
    return comp, calls


class AnthropicBody(TypedDict, total=False):
    """A Messages API request as `messages.create` takes it."""

    model: str
    messages: list[AnthropicTurn]
    max_tokens: int
    system: str
    temperature: float
    tools: list[JSONObject]
    tool_choice: dict[str, str]
    output_config: dict[str, str]


class AnthropicEndpoint:
    """Sends one role's calls to the Messages API, with the gateway's retry policy (the SDK's own is off)."""

    def __init__(self, role: str, role_cfg: LLMRoleConfig, retry: RetryPolicy, rng_seed: int = 0):
        import anthropic

        self.role = role
        self.cfg = role_cfg
        self.retry = retry
        self.retries_done = 0
        self.faults: Counter = Counter()
        self._rng = random.Random(rng_seed)
        env = role_cfg.api_key_env or "ANTHROPIC_API_KEY"
        key = os.environ.get(env)
        if not key and not role_cfg.base_url:
            raise LLMConfigError(f"missing API key: set the environment variable {env} for the Anthropic API")
        self._anthropic = anthropic
        self.client = anthropic.AsyncAnthropic(
            api_key=key or "not-needed", base_url=role_cfg.base_url or None, max_retries=0,
            timeout=anthropic.Timeout(role_cfg.timeout_s, connect=min(role_cfg.connect_timeout_s, role_cfg.timeout_s)),
        )  # fmt: skip

    def prepare(self) -> None:
        """The anthropic SDK's client is built with the endpoint."""

    def completion_budget(self, req: ChatRequest) -> int:
        return self.cfg.reply_budget(req.max_tokens)

    def request_kwargs(self, req: ChatRequest, budget: Optional[int] = None) -> ChatBody:
        """The Messages request; also the gateway's cache payload, so it carries the chat messages as sent."""
        system, turns = to_messages(req.messages)
        n = budget or self.completion_budget(req)
        if self.cfg.max_reply_tokens:
            n = min(n, self.cfg.max_reply_tokens)
        kw: ChatBody = {"model": self.cfg.model, "messages": req.messages, "max_tokens": n, "_turns": turns}
        if system:
            kw["_system"] = system
        temperature = self.cfg.temperature if req.temperature is None else req.temperature
        if temperature is not None:
            kw["temperature"] = temperature
        tools = getattr(req, "tools", None)
        if tools:
            kw["tools"] = tools
            kw["tool_choice"] = getattr(req, "tool_choice", None) or "auto"
        if req.response_format is not None:
            kw["response_format"] = req.response_format
        effort = (self.cfg.reasoning_effort or "").strip().lower()
        if effort in CLAUDE_EFFORTS:
            kw["reasoning_effort"] = effort
        return kw

    def _body(self, kw: ChatBody) -> AnthropicBody:
        body: AnthropicBody = {"model": kw["model"], "messages": kw["_turns"], "max_tokens": kw["max_tokens"]}
        if kw.get("_system"):
            body["system"] = kw["_system"]
        if "temperature" in kw:
            body["temperature"] = kw["temperature"]
        if kw.get("tools"):
            body["tools"] = to_tools(kw["tools"])
            body["tool_choice"] = {"type": "auto"}
        if kw.get("reasoning_effort"):
            body["output_config"] = {"effort": kw["reasoning_effort"]}
        if kw.get("response_format"):  # JSON wanted: said in the system text (the API has no response_format)
            body["system"] = (body.get("system", "") + "\n\nReply with only a JSON value, no other text.").strip()
        return body

    async def send(self, req: ChatRequest, budget: Optional[int] = None) -> Completion:
        a = self._anthropic
        body: Any = self._body(self.request_kwargs(req, budget))  # the SDK's parameter types are narrower than JSON
        start, attempt = time.monotonic(), 0
        while True:
            try:
                msg = await self.client.messages.create(**body)
                return from_message(msg.model_dump())[0]
            except asyncio.CancelledError:
                raise
            except a.APIStatusError as e:
                code = e.status_code
                if code not in (408, 409, 429, 529) and code < 500:
                    raise LLMRequestRejected(
                        f"{self.role} call rejected with HTTP {code} by the Anthropic API model {self.cfg.model!r}: "
                        f"{str(e)[:200]}; check the model name and llm.{self.role}.api_key_env"
                    ) from None
                kind, retry_after = f"HTTP {code}", _retry_after(e)
            except (a.APIConnectionError, a.APITimeoutError) as e:
                kind, retry_after = type(e).__name__, None
            self.faults[kind] += 1
            delay = (
                retry_after
                if retry_after is not None
                else min(self.retry.max_s, self.retry.base_s * 2**attempt) * (0.5 + self._rng.random())
            )
            elapsed = time.monotonic() - start
            if attempt >= self.retry.max_retries or elapsed + delay > self.retry.window_s:
                raise LLMUnavailable(
                    f"{self.role} endpoint unavailable at the Anthropic API model {self.cfg.model!r}: {kind} "
                    f"({attempt + 1} attempts in {elapsed:.0f}s); retry later or raise llm.max_retries / llm.retry_window_s"
                )
            attempt += 1
            self.retries_done += 1
            await asyncio.sleep(delay)

    async def close(self) -> None:
        await self.client.close()


def _retry_after(e: Any) -> Optional[float]:
    try:
        return max(0.0, float(e.response.headers.get("retry-after")))
    except (AttributeError, TypeError, ValueError):
        return None
