"""Agent model calls inside the gateway: chat completions with tools, under the same cache, ledger, budgets,
rate limits and retries as every other call (`Gateway.agent_chat` delegates here)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from skillopt_ray.llm.agent_api import AgentReply, AgentRequest
from skillopt_ray.llm.cache import request_key
from skillopt_ray.llm.client import Completion, RoleEndpoint, parse_completion
from skillopt_ray.llm.types import CacheMiss


@dataclass
class AgentCompletion(Completion):
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def tool_calls_of(body: str) -> list[dict[str, Any]]:
    """The tool calls of a chat-completion body ({id, name, arguments}); [] when there are none."""
    try:
        msg = json.loads(body)["choices"][0].get("message") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return []
    out = []
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") or {}
        args = fn.get("arguments")
        out.append(
            {
                "id": str(c.get("id") or ""),
                "name": str(fn.get("name") or ""),
                "arguments": args if isinstance(args, str) else json.dumps(args or {}),
            }
        )
    return out


class AgentEndpoint(RoleEndpoint):
    """A role's endpoint that also sends `tools` and reads `tool_calls`; retries and fault naming are the chat
    endpoint's own."""

    def request_kwargs(self, req: Any, budget: Optional[int] = None) -> dict[str, Any]:
        kw = super().request_kwargs(req, budget)
        kw.pop("response_format", None)
        if getattr(req, "tools", None):
            kw["tools"] = req.tools
            kw["tool_choice"] = req.tool_choice or "auto"
        return kw

    async def _post(self, kw: dict[str, Any], headers: dict[str, str]) -> Completion:
        raw = await self.client.chat.completions.with_raw_response.create(**kw, extra_headers=headers or None)
        self._last_answer = time.monotonic()
        http = raw.http_response
        calls = tool_calls_of(http.text)
        try:
            comp = parse_completion(http.text, http.headers.get("content-type", ""))
        except Exception:
            if not calls:
                raise
            comp = Completion("", "tool_calls", 0, 0)
        return AgentCompletion(comp.content, comp.finish_reason, comp.prompt_tokens, comp.completion_tokens, calls)


def agent_endpoint(gw: Any, role: str) -> Any:
    """The gateway's agent endpoint for `role`, made at its first agent call (chat-only runs never build one); an
    Anthropic role's own endpoint already sends tools and reads tool calls."""
    eps = gw.__dict__.setdefault("agent_endpoints", {})
    if role not in eps:
        base = gw.endpoints[role]
        eps[role] = base if base.cfg.provider == "anthropic" else AgentEndpoint(role, base.cfg, base.retry, rng_seed=7)
    return eps[role]


def flat_call(c: dict[str, Any]) -> dict[str, Any]:
    """A tool call as {id, name, arguments}, from either that shape or the chat API's {id, function: {...}}."""
    if "function" not in c:
        return c
    fn = c.get("function") or {}
    args = fn.get("arguments")
    return {"id": str(c.get("id") or ""), "name": str(fn.get("name") or ""),
            "arguments": args if isinstance(args, str) else json.dumps(args or {})}  # fmt: skip


# parts of a tool's output that differ between two runs of the same episode (Codex's output chunk id and the
# command's wall time): left out of the cache key only, so a replayed episode finds its recorded replies
_VOLATILE = (re.compile(r"Chunk ID: \S+"), re.compile(r"Wall time: [0-9.]+ seconds"))


def stable_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        c = m.get("content")
        if m.get("role") == "tool" and isinstance(c, str):
            for pat in _VOLATILE:
                c = pat.sub(pat.pattern.split(":")[0] + ": _", c)
            m = {**m, "content": c}
        out.append(m)
    return out


def cache_payload(ep: Any, req: AgentRequest) -> dict[str, Any]:
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
    ep = agent_endpoint(gw, req.role)
    key = request_key(cache_payload(ep, req)) if gw.cache is not None else ""
    if gw.cache is not None:
        hit = gw.cache.get(key)
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
    limiter = gw.limiters[req.role]
    est = req.prompt_chars() // 4 + ep.completion_budget(req)
    gw.ledger.in_flight += 1
    try:
        async with limiter:
            await limiter.acquire_window(est)
            try:
                comp = await ep.send(req)
            except Exception:
                gw.ledger.record_error(req.role, req.stage)
                raise
        gw.ledger.record(req.role, req.stage, ep.cfg.model, comp.prompt_tokens, comp.completion_tokens)
    finally:
        gw.ledger.in_flight -= 1
    if comp.finish_reason == "length":
        gw.ledger.record_incomplete(req.role, req.stage, "truncated")
    calls = [flat_call(c) for c in getattr(comp, "tool_calls", []) or []]
    reply = AgentReply(comp.content, calls, comp.prompt_tokens, comp.completion_tokens, False, comp.finish_reason)
    if gw.cache is not None:
        gw.cache.put(
            key,
            req.stage,
            {
                "content": reply.content,
                "tool_calls": calls,
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "finish_reason": reply.finish_reason,
            },
        )
    return reply


def agent_settings(role_cfg: Any) -> dict[str, Any]:
    """What a benchmark needs to run a role's episodes in an agent harness (no secrets: key names only)."""
    from dataclasses import asdict

    agent = getattr(role_cfg, "agent", None)
    return {
        "harness": getattr(role_cfg, "harness", "chat"),
        "model": role_cfg.model,
        "agent": asdict(agent) if agent is not None else {},
    }
