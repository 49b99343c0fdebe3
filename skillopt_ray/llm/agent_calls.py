"""Agent model calls inside the gateway: chat completions with tools, under the same cache, ledger (journaled),
budgets, rate limits and retries as every other call (`Gateway.agent_chat` delegates here). Unlike a chat
call, a reply cut at the completion limit goes back to the agent (counted as truncated): the CLI handles it."""

from __future__ import annotations

import json
import re
from typing import Any, cast

from skillopt_envs.chat import ChatMessage, ToolCall

from skillopt_ray.llm.agent_api import AgentReply, AgentRequest
from skillopt_ray.llm.cache import request_key
from skillopt_ray.llm.endpoint import Endpoint
from skillopt_ray.llm.types import CacheMiss
from skillopt_ray.llm.wire import CachePayload, FlatToolCall


def flat_call(c: ToolCall) -> FlatToolCall:
    """A tool call as {id, name, arguments}, from the chat API's {id, function: {...}}; one already flat as it is."""
    if "function" not in c:
        return cast(FlatToolCall, c)
    fn: dict[str, object] = dict(c.get("function") or {})
    args = fn.get("arguments")
    return {"id": str(c.get("id") or ""), "name": str(fn.get("name") or ""),
            "arguments": args if isinstance(args, str) else json.dumps(args or {})}  # fmt: skip


# parts of a tool's output that differ between two runs of the same episode (Codex's output chunk id and the
# command's wall time): left out of the cache key only, so a replayed episode finds its recorded replies
_VOLATILE = (re.compile(r"Chunk ID: \S+"), re.compile(r"Wall time: [0-9.]+ seconds"))


def stable_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    out = []
    for m in messages:
        c = m.get("content")
        if m.get("role") == "tool" and isinstance(c, str):
            for pat in _VOLATILE:
                c = pat.sub(pat.pattern.split(":")[0] + ": _", c)
            m = {**m, "content": c}
        out.append(m)
    return out


def cache_payload(ep: Endpoint, req: AgentRequest) -> CachePayload:
    kw = ep.request_kwargs(req)
    return {
        "agent": True,
        "provider": ep.cfg.provider,
        "model": kw["model"],
        "messages": stable_messages(kw["messages"]),
        "tools": kw.get("tools"),
        "temperature": kw.get("temperature"),
        "max_tokens": kw.get("max_tokens", kw.get("max_completion_tokens")),
        "reasoning_effort": kw.get("reasoning_effort"),
        "sample_key": req.key,
    }


async def agent_chat(gw: Any, req: AgentRequest) -> AgentReply:
    """One agent call: cache (record/replay), budget check, limits, retries, ledger, as Gateway.chat does."""
    gw._check_role(req.role)
    ep = gw.endpoints[req.role]
    key = request_key(cache_payload(ep, req)) if gw.cache is not None else ""
    if gw.cache is not None:
        hit = gw.cache.get_agent(key)
        if hit is not None:
            gw.ledger.record_hit(req.role, req.stage)
            return AgentReply(
                hit["content"],
                list(hit.get("tool_calls") or []),
                hit.get("prompt_tokens", 0),
                hit.get("completion_tokens", 0),
                True,
                hit.get("finish_reason", ""),
            )
        if gw.cfg.cache_mode == "replay":
            raise CacheMiss(
                f"replay mode: no recorded response for an agent {req.role}/{req.stage} call (key {key[:12]}); "
                "rerun with llm.cache_mode=record to call the model"
            )
    gw.ledger.check_budget()

    def keep(comp: Any) -> None:  # the reply is cached before the ledger records the call (a kill between: lost, kept)
        calls = [flat_call(c) for c in getattr(comp, "tool_calls", []) or []]
        gw.cache.put(
            key,
            req.stage,
            {
                "content": comp.content,
                "tool_calls": calls,
                "prompt_tokens": comp.prompt_tokens,
                "completion_tokens": comp.completion_tokens,
                "finish_reason": comp.finish_reason,
            },
        )

    # limits, journal, retries, ledger: the chat path's own paid call
    comp = await gw._send(req, keep=keep if gw.cache is not None else None)
    if comp.finish_reason == "length":
        gw.ledger.record_incomplete(req.role, req.stage, "truncated")
    calls = [flat_call(c) for c in getattr(comp, "tool_calls", []) or []]
    cost = gw.ledger.cost_of(ep.cfg.model, comp.prompt_tokens, comp.completion_tokens)
    return AgentReply(comp.content, calls, comp.prompt_tokens, comp.completion_tokens, False, comp.finish_reason, cost)
