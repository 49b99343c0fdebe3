"""The one place every model call goes through: cache, limits, retries, ledger, budget, JSON re-ask.

`Gateway` is plain async Python (unit-testable); `GatewayHost` hosts it for the run (as the Ray actor
`GatewayActor`, or as an object of the one-process engine: skillopt_ray/engine/executor.py) so the driver and every
environment worker share its limits. This module imports no Ray: the Ray names are made on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional, TypedDict, cast

from skillopt_envs.chat import ChatRequest, ChatResult, JsonExtractionError, JsonResult, ResponseFormat
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base.io import atomic_write_json, read_json
from skillopt_ray.base.lifeline import Owner
from skillopt_ray.base.ray_class import ActorOptions
from skillopt_ray.config import LLMConfig, judge_role
from skillopt_ray.config.routing import resolved_api
from skillopt_ray.llm.cache import ResponseCache, request_key
from skillopt_ray.llm.callbox import CallBatcher, Mailboxes
from skillopt_ray.llm.client import Completion, RetryPolicy, RoleEndpoint, describe
from skillopt_ray.llm.endpoint import Endpoint
from skillopt_ray.llm.jsonout import parse_and_validate
from skillopt_ray.llm.ledger import Ledger, journal_path
from skillopt_ray.llm.prompt_bound import PromptBound
from skillopt_ray.llm.ratelimit import EndpointLimiter
from skillopt_ray.llm.request_format import bounded_schema, response_format
from skillopt_ray.llm.responses import ResponsesEndpoint
from skillopt_ray.llm.types import (
    BudgetExceeded,
    CacheMiss,
    LLMConfigError,
    LLMError,
    LLMInternalError,
    MalformedOutput,
    ReplyFiltered,
    ReplyTruncated,
    StoreUnwritable,
    unwritable,
)
from skillopt_ray.llm.wire import AgentSettings, CachedReply, CachePayload
from skillopt_ray.runs.records import LedgerState


class GatewayStats(TypedDict, total=False):
    """What the gateway's endpoints went through, per role: retries, faults by kind, and (the gateway only) the peak
    of calls in flight."""

    retries: dict[str, int]
    faults: dict[str, dict[str, int]]
    peak_in_flight: dict[str, int]


# the model roles: the target plays episodes, the optimizer edits the skill, the judge compares outcomes of rubric
# tasks (its own endpoint, or the optimizer's: stages/judge.py)
ROLES = ("target", "optimizer", "judge")


def role_endpoints(cfg: LLMConfig) -> dict[str, Endpoint]:
    """One SDK client per role (a role without its own base_url takes llm.base_url): a RoleEndpoint, or an
    AnthropicEndpoint with the same interface for provider=anthropic."""
    retry = RetryPolicy.from_config(cfg)
    out: dict[str, Endpoint] = {}
    for i, role in enumerate(ROLES):
        rc = judge_role(cfg) if role == "judge" else getattr(cfg, role)
        if cfg.base_url and not rc.base_url:
            rc.base_url = cfg.base_url
        if rc.provider == "anthropic":  # the Messages API through the anthropic SDK
            from skillopt_ray.llm.anthropic_backend import AnthropicEndpoint

            out[role] = AnthropicEndpoint(role, rc, retry, rng_seed=i)
        elif resolved_api(rc.provider, rc.api, rc.model) == "responses":
            out[role] = ResponsesEndpoint(role, rc, retry, rng_seed=i)
        else:
            out[role] = RoleEndpoint(role, rc, retry, rng_seed=i)
    return out


class Gateway:
    def __init__(self, cfg: LLMConfig, cache_path: Optional[str], ledger_path: Optional[str] = None):
        self.cfg = cfg
        self.endpoints = role_endpoints(cfg)
        # the SDK's import and the target's client (the role that plays the episodes, so the first to call) are made
        # here, before any call: in one process MLflow's import starts with the first call and must not slow it;
        # the other roles' clients come at their first call (an eval never makes them)
        self.endpoints["target"].prepare()
        self.limiters: dict[str, EndpointLimiter] = {}
        # shards of the HTTP sending (GatewayActor with shards > 1): they only send; cache, ledger, budgets and
        # limits stay here, so they are exact whatever the number of shards
        self.senders: list[Any] = []
        self.respawn_sender: Optional[Any] = None  # () -> a new sender actor
        self._next_sender = 0
        for role in ROLES:
            rc = self.endpoints[role].cfg
            ep_key = f"{rc.provider}|{rc.base_url or rc.azure_endpoint}|{rc.model}"
            if ep_key not in self.limiters:
                self.limiters[ep_key] = EndpointLimiter(
                    rc.max_concurrency, rc.requests_per_minute, rc.tokens_per_minute
                )
            self.limiters[role] = self.limiters[ep_key]
        self.cache = ResponseCache(cache_path) if (cache_path and cfg.cache_mode != "off") else None
        if cfg.cache_mode == "replay" and self.cache is None:
            raise LLMConfigError(
                "llm.cache_mode=replay needs a response cache; point output_dir/run_name at a recorded run"
            )
        self.ledger_path = ledger_path
        self._released = asyncio.Event()  # set (and replaced) whenever a call's budget hold is released
        self.prompt_bound = PromptBound()  # worst-case prompt tokens, calibrated on the endpoint's own counts
        prior = read_json(ledger_path) if ledger_path and Path(ledger_path).exists() else None
        self.ledger = Ledger(
            cfg.prices, cfg.budget, prior, journal=journal_path(ledger_path)
        )  # kill-safe: every paid call journaled

    def _cache_payload(self, req: ChatRequest) -> CachePayload:
        ep = self.endpoints[req.role]
        kw = ep.request_kwargs(req)
        payload: CachePayload = {
            "provider": ep.cfg.provider,
            "model": kw["model"],
            "messages": kw["messages"],
            "temperature": kw.get("temperature"),
            "max_tokens": kw.get("max_tokens"),
            "reasoning_effort": kw.get("reasoning_effort"),
            "response_format": kw.get("response_format"),
            "sample_key": req.key,
        }
        if "max_completion_tokens" in kw:  # only then, so keys recorded before this field existed stay valid
            payload["max_completion_tokens"] = kw["max_completion_tokens"]
        if "tools" in kw:  # likewise: only requests that offer tools carry them in their key
            payload["tools"] = kw["tools"]
            payload["tool_choice"] = kw["tool_choice"]
        if "extra_body" in kw:  # a server's own reasoning switch (llm=qwen, llm=minimax)
            payload["extra_body"] = kw["extra_body"]
        if getattr(ep, "api", "chat") == "responses":  # another request on the wire: chat keys stay as they were
            payload["api"] = "responses"
            if ep.cfg.reasoning_summary:
                payload["reasoning_summary"] = ep.cfg.reasoning_summary
        return payload

    def _check_role(self, role: str) -> None:
        if role not in self.endpoints:
            raise LLMConfigError(f"unknown role {role!r}; use 'target', 'optimizer' or 'judge'")

    async def chat(self, req: ChatRequest) -> ChatResult:
        self._check_role(req.role)
        key = request_key(self._cache_payload(req)) if self.cache is not None else ""
        if self.cache is not None:
            hit = self._cached(req, key)
            if hit is not None:
                return hit
            if self.cfg.cache_mode == "replay":
                raise CacheMiss(
                    f"replay mode: no recorded response for a {req.role}/{req.stage} call (key {key[:12]}); "
                    "rerun with llm.cache_mode=record to call the model"
                )
        self.ledger.check_budget()
        ep = self.endpoints[req.role]
        keep = (lambda comp: self._remember_usable(key, req.stage, comp)) if self.cache is not None else None
        comp = await self._send(req, keep=keep)
        if comp.finish_reason == "length" and self.cfg.truncated_reply != "keep":
            self.ledger.record_incomplete(req.role, req.stage, "truncated")
            budget = ep.completion_budget(req)
            if self.cfg.truncated_reply == "retry":
                self.ledger.check_budget()
                comp = await self._send(req, 2 * budget, keep=keep)
                budget *= 2
                if comp.finish_reason == "length":
                    self.ledger.record_incomplete(req.role, req.stage, "truncated")
            if comp.finish_reason == "length":
                raise ReplyTruncated(
                    f"{req.role}/{req.stage} reply cut off at the completion limit ({budget} tokens, finish_reason=length"
                    f"{', also after a retry with twice the budget' if self.cfg.truncated_reply == 'retry' else ''}) at "
                    f"{describe(ep.cfg)}; raise llm.{req.role}.{'max_completion_tokens' if ep.cfg.max_completion_tokens else 'max_tokens'}"
                )
        if comp.finish_reason == "content_filter":
            self.ledger.record_incomplete(req.role, req.stage, "filtered")
            raise ReplyFiltered(
                f"{req.role}/{req.stage} reply stopped by the content filter (finish_reason=content_filter) "
                f"at {describe(ep.cfg)}"
            )
        return _result(comp)

    def _remember_usable(self, key: str, stage: str, comp: Completion) -> None:
        """Keep a reply the caller will use (not one cut at the limit that is retried or refused, nor a filtered one),
        under the original request's key, so a resumed run replays a length retry too. `_send` calls it before the
        ledger records the call: a kill in between leaves the call counted lost and its reply kept, so the resumed
        run does not pay for it again (the other order paid a recorded call twice)."""
        truncated = comp.finish_reason == "length" and self.cfg.truncated_reply != "keep"
        if not truncated and comp.finish_reason != "content_filter":
            self._remember(key, stage, _result(comp))

    def _cached(self, req: ChatRequest, key: str) -> Optional[ChatResult]:
        """The recorded reply for `key` (counted as a cache hit), or None."""
        assert self.cache is not None
        hit = self.cache.get(key)
        if hit is None:
            return None
        self.ledger.record_hit(req.role, req.stage)
        return ChatResult(
            hit["content"],
            hit.get("prompt_tokens", 0),
            hit.get("completion_tokens", 0),
            True,
            hit.get("finish_reason", ""),
            list(hit.get("tool_calls") or []),
            hit.get("reasoning_summary", ""),
        )

    def _remember(self, key: str, stage: str, result: ChatResult) -> None:
        """Record a usable reply; optional fields only when present, so entries keep one shape across APIs."""
        assert self.cache is not None
        entry: CachedReply = {
            "content": result.content,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "finish_reason": result.finish_reason,
        }
        if result.tool_calls:
            entry["tool_calls"] = result.tool_calls
        if result.reasoning_summary:
            entry["reasoning_summary"] = result.reasoning_summary
        self.cache.put(key, stage, entry)

    async def _send(
        self, req: ChatRequest, budget: Optional[int] = None, keep: Optional[Callable[[Completion], None]] = None
    ) -> Completion:
        """One paid call (with the endpoint's retries) under the role's limits, recorded in the ledger. `keep` stores
        the reply (the response cache) before the ledger records it as answered. Refused (StoreUnwritable) once a
        store could not write: see `_refuse_paid_calls`."""
        self._refuse_paid_calls()
        ep = self.endpoints[req.role]
        limiter = self.limiters[req.role]
        wanted = budget or ep.completion_budget(req)
        if ep.cfg.max_reply_tokens:  # the request is capped there (request_kwargs), so is its worst case
            wanted = min(wanted, ep.cfg.max_reply_tokens)
        prompt_est = req.prompt_chars() // 4
        where = f"{ep.cfg.provider}|{ep.cfg.base_url or ep.cfg.azure_endpoint}|{ep.cfg.model}"
        prompt_worst, chars = self.prompt_bound.worst(req, where)
        # under a token or cost cap the completion limit sent is what remains (Ledger.hold): never past the cap
        hold, completion_est = await self.admit(ep.cfg.model, prompt_worst, wanted)
        est = prompt_est + completion_est
        call = None
        try:
            async with limiter:
                await limiter.acquire_window(est)
                self._refuse_paid_calls()  # a store failed while this call waited for its turn
                # journaled before it is sent: a kill from here on leaves it counted as lost, not forgotten
                call = self.ledger.begin(req.role, req.stage, ep.cfg.model, prompt_est, completion_est)
                sent = completion_est if completion_est < wanted else budget
                try:
                    comp = await (self._sharded_send(req, sent) if self.senders else ep.send(req, sent))
                except ReplyFiltered:
                    self.ledger.record_incomplete(req.role, req.stage, "filtered", call)
                    raise
                except Exception as exc:
                    self._record_unread(req, exc)
                    self.ledger.record_error(req.role, req.stage, call)
                    raise
            self._record_unread(req, comp)
            self._account(req, call, comp, keep)
            self.prompt_bound.observe(where, chars, comp.prompt_tokens)
            if completion_est < wanted and comp.finish_reason == "length":
                raise BudgetExceeded(
                    f"budget cap reached: a {req.role}/{req.stage} reply was cut at the {completion_est} tokens left "
                    f"under {self.ledger.room(ep.cfg.model, 0)[1] or 'the cap'}; raise it and rerun the same command "
                    "to resume"
                )
            return comp
        finally:
            self.ledger.release(hold)
            self._wake_admissions()
            if call is not None and self.ledger.is_open(call):  # cancelled by its caller: no outcome line written
                if self._store_failure() is not None:  # the run is stopping: a reply would not be kept, nor read
                    self.ledger.unkept(req.role, req.stage, ep.cfg.model, call, prompt_est, completion_est)
                else:
                    self.ledger.settle(call)

    def _account(self, req: ChatRequest, call: str, comp: Completion, keep: Optional[Callable[[Completion], None]]
                 ) -> None:  # fmt: skip
        """Keep a paid reply (`keep`), then record the call. A reply the store could not write (StoreUnwritable: a
        full disk) still goes to its caller (kept in memory for this run), and its call counts as lost, as the rerun
        pays for it again."""
        model = self.endpoints[req.role].cfg.model
        try:
            if keep is not None:
                keep(comp)
        except StoreUnwritable:
            self.ledger.unkept(req.role, req.stage, model, call, comp.prompt_tokens, comp.completion_tokens)
            return
        self.ledger.record(req.role, req.stage, model, comp.prompt_tokens, comp.completion_tokens, call,
                           reasoning_tokens=comp.reasoning_tokens, cached_tokens=comp.cached_tokens)  # fmt: skip

    def _refuse_paid_calls(self) -> None:
        """Once the response cache or the ledger's journal could not write (a full disk), no new paid call goes out:
        its reply could not be kept, so the rerun would pay for it again."""
        failed = self._store_failure()
        if failed is not None:
            raise StoreUnwritable(failed.message)

    def _store_failure(self) -> Optional[StoreUnwritable]:
        """The first failed write of the ledger's journal or the response cache, if any."""
        return self.ledger.failed or (self.cache.failed if self.cache is not None else None)

    async def admit(self, model: str, prompt_worst: int, completion: int) -> tuple[int, int]:
        """Wait until the ledger admits a call of this worst case (Ledger.hold): while calls in flight could carry
        it over a cap it waits for them to settle; a cap already reached (or too close for a minimal call) raises
        BudgetExceeded. Returns the hold and the completion limit to send."""
        while True:
            released = self._released  # taken before the check: a release after it wakes this wait
            admitted = self.ledger.hold(model, prompt_worst, completion)
            if admitted is not None:
                return admitted
            await released.wait()

    def _wake_admissions(self) -> None:
        """A hold went: calls waiting for admission check again."""
        self._released.set()
        self._released = asyncio.Event()

    def _record_unread(self, req: ChatRequest, outcome: Any) -> None:
        """Attempts of this call the endpoint answered (and billed) whose body was cut off in transit: in the ledger
        apart from `calls`, each estimated at the prompt's size plus the bytes that arrived."""
        n = int(getattr(outcome, "unread", 0) or 0)
        if n:
            model = self.endpoints[req.role].cfg.model
            prompt_est = req.prompt_chars() // 4
            self.ledger.record_unread(req.role, req.stage, model, n, n * prompt_est, outcome.unread_bytes // 4)

    async def _sharded_send(self, req: ChatRequest, budget: Optional[int]) -> Completion:
        """The HTTP part of a call on the next sender shard (round robin); a dead shard is replaced and the call
        sent once more on another, so losing a shard (or its node) costs no call."""
        for attempt in (0, 1):
            i = self._next_sender % len(self.senders)
            self._next_sender += 1
            sender = self.senders[i]
            try:
                with _unwrapped():
                    return await sender.send.remote(req, budget)
            except Exception as e:
                if not _actor_died(e):
                    raise
                if self.senders[i] is sender and self.respawn_sender is not None:
                    self.senders[i] = self.respawn_sender()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def structured_output_mode(self, role: str) -> str:
        self._check_role(role)
        return self.endpoints[role].cfg.structured_output

    async def agent_chat(self, req: Any) -> Any:
        """An agent CLI's model call (tools offered): skillopt_ray/llm/agent_calls.py."""
        from skillopt_ray.llm.agent_calls import agent_chat

        return await agent_chat(self, req)

    def agent_settings(self, role: str = "target") -> AgentSettings:
        """The role's harness (chat | codex | claude_code), model and agent settings, for the benchmarks."""
        from skillopt_ray.llm.wire import agent_settings  # not agent_calls: a chat run never loads the agent API

        self._check_role(role)
        return agent_settings(self.endpoints[role].cfg)

    def response_format_for(self, role: str, schema: JSONObject, name: str) -> Optional[ResponseFormat]:
        rc = self.endpoints[role].cfg if role in self.endpoints else None
        if rc is not None and (rc.schema_max_items or rc.schema_max_chars):
            schema = bounded_schema(schema, rc.schema_max_items, rc.schema_max_chars)
        return response_format(self.structured_output_mode(role), schema, name)

    async def chat_json(self, req: ChatRequest, schema: Optional[JSONObject], name: str = "reply") -> JsonResult:
        """Chat expecting JSON; one re-ask carrying the validation error, then MalformedOutput."""
        fmt = self.response_format_for(req.role, schema, name) if schema is not None else None
        first = ChatRequest(req.role, req.stage, req.messages, req.key, fmt, req.max_tokens, req.temperature)
        res = await self.chat(first)
        try:
            return JsonResult(parse_and_validate(res.content, schema), res.content)
        except JsonExtractionError as e:
            err1 = str(e)
        messages = list(req.messages) + [
            {"role": "assistant", "content": res.content[:4000]},
            {
                "role": "user",
                "content": f"Your reply could not be used: {err1}. Reply again with only a JSON value that matches the schema"
                + (f":\n{json.dumps(schema)}" if schema else "."),
            },
        ]
        second = ChatRequest(req.role, req.stage, messages, req.key + "#reask", fmt, req.max_tokens, req.temperature)
        res2 = await self.chat(second)
        try:
            return JsonResult(parse_and_validate(res2.content, schema), res2.content, reasked=True, errors=[err1])
        except JsonExtractionError as e:
            raise MalformedOutput(f"{req.role}/{req.stage}: malformed output after one re-ask: {e}") from None

    def save_ledger(self) -> LedgerState:
        """Write ledger.json and return the ledger (a step's commit and a run's summary take it). Refused once a
        store could not write, so no step commits and no score is written from a run that stopped paying."""
        self._refuse_paid_calls()
        data = self.ledger.to_dict()
        if self.ledger_path:
            try:
                atomic_write_json(self.ledger_path, data)
            except OSError as e:
                raise unwritable("the ledger", self.ledger_path, e) from None
        return data

    def ledger_snapshot(self) -> LedgerState:
        return self.ledger.to_dict()

    def stats(self) -> GatewayStats:
        return {
            "retries": {r: ep.retries_done for r, ep in self.endpoints.items()},
            "faults": {r: dict(ep.faults) for r, ep in self.endpoints.items()},
            "peak_in_flight": {r: self.limiters[r].peak_in_flight for r in self.endpoints},
        }

    async def close(self) -> None:
        with contextlib.suppress(StoreUnwritable):  # the run already stopped on it
            self.save_ledger()
        for ep in self.endpoints.values():
            await ep.close()
        if self.cache is not None:
            self.cache.close()


def _result(comp: Completion) -> ChatResult:
    """A paid reply as the caller gets it (not from the cache)."""
    return ChatResult(
        comp.content,
        comp.prompt_tokens,
        comp.completion_tokens,
        False,
        comp.finish_reason,
        list(comp.tool_calls),
        comp.reasoning_summary,
    )


def _one_line(exc: Exception, req: ChatRequest) -> LLMError:
    """What leaves the gateway actor: always an LLMError with a one-line message and no traceback chain.

    Ray re-raises it at the caller as an instance of the same class, so `except LLMError` and `.message`
    work there; anything that is not an LLMError would arrive as a Ray task error carrying a remote trace.
    """
    if isinstance(exc, LLMError):
        exc.__cause__ = exc.__context__ = None
        exc.__traceback__ = None
        return exc
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return LLMInternalError(f"{req.role}/{req.stage} call failed in the LLM gateway: {type(exc).__name__}: {first}")


class Sender:
    """One shard of the gateway's HTTP sending: its own SDK clients and retries, nothing else. The SDK's
    per-call CPU (milliseconds, more with a thousand connections in one pool) is what one gateway process
    runs out of first; shards spread it over processes and, placed with SPREAD, over nodes (Ray only)."""

    ray_name = "SenderActor"
    ray_options: ActorOptions = {"num_cpus": 0, "max_concurrency": 4096}

    def __init__(self, llm_cfg: LLMConfig, owners: Optional[list[Owner]] = None):
        from skillopt_ray.base.lifeline import watch

        watch(list(owners or []), "LLM sender")
        self.endpoints = role_endpoints(llm_cfg)

    async def send(self, req: ChatRequest, budget: Optional[int]) -> Completion:
        try:
            return await self.endpoints[req.role].send(req, budget)
        except Exception as e:  # noqa: BLE001 - see _one_line
            raise _one_line(e, req) from None

    def stats(self) -> GatewayStats:
        return {
            "retries": {r: ep.retries_done for r, ep in self.endpoints.items()},
            "faults": {r: dict(ep.faults) for r, ep in self.endpoints.items()},
        }

    def pid(self) -> int:
        import os

        return os.getpid()

    async def close(self) -> None:
        for ep in self.endpoints.values():
            await ep.close()


class GatewayHost:
    """The run's Gateway, shared by the driver and the environment workers (the Ray actor `GatewayActor`, or an
    object of the one-process engine).

    `llm_cfg` is the run's checked `llm` section (typed: not rebuilt or validated here). `shards` > 1 (on Ray only)
    moves the HTTP sending into that many SenderActors (spread over nodes); the cache, ledger, budgets and
    rate/concurrency limits stay in this actor, so they are exact whatever the number of shards."""

    ray_name = "GatewayActor"
    ray_options: ActorOptions = {"num_cpus": 0, "max_concurrency": 4096}

    def __init__(
        self,
        llm_cfg: LLMConfig,
        cache_path: Optional[str],
        ledger_path: Optional[str],
        owners: Optional[list[Owner]] = None,
        shards: int = 1,
    ):
        from skillopt_ray.base.lifeline import identity, watch
        from skillopt_ray.base.startup_trace import mark

        watch(list(owners or []), "LLM gateway")  # the run's owner gone: exit before another queued call is sent
        mark("gateway-started")
        self.gw = Gateway(llm_cfg, cache_path, ledger_path)
        mark("gateway-ready")
        self.boxes = Mailboxes(self.gw.chat, _one_line)  # batched chat calls (skillopt_ray/llm/callbox.py)
        if shards > 1 and "ray" in sys.modules:  # shards are processes: the one-process engine sends from here
            sender_owners = [*(owners or []), identity()]
            sender_class = _ray_class(Sender)

            def spawn() -> Any:
                return sender_class.options(scheduling_strategy="SPREAD").remote(llm_cfg, sender_owners)

            self.gw.respawn_sender = spawn
            self.gw.senders = [spawn() for _ in range(shards)]

    async def pids(self) -> list[int]:
        """This actor's pid, then its senders' (benchmarks read their CPU time)."""
        import os

        return [os.getpid(), *await asyncio.gather(*(s.pid.remote() for s in self.gw.senders))]

    async def chat(self, req: ChatRequest) -> ChatResult:
        try:
            return await self.gw.chat(req)
        except Exception as e:  # noqa: BLE001 - see _one_line
            raise _one_line(e, req) from None

    def submit(self, box: str, calls: list[tuple[int, ChatRequest]]) -> int:
        """Start a caller's batch of chat calls; their outcomes wait in its mailbox for collect()."""
        return self.boxes.submit(box, calls)

    async def collect(self, box: str, wait_s: float) -> list[Any]:
        return await self.boxes.collect(box, wait_s)

    def cancel_calls(self, box: str, seqs: list[int]) -> None:
        self.boxes.cancel(box, seqs)

    async def chat_json(self, req: ChatRequest, schema: Optional[JSONObject], name: str = "reply") -> JsonResult:
        try:
            return await self.gw.chat_json(req, schema, name)
        except Exception as e:  # noqa: BLE001 - see _one_line
            raise _one_line(e, req) from None

    def structured_output_mode(self, role: str) -> str:
        return self.gw.structured_output_mode(role)

    async def agent_chat(self, req: Any) -> Any:
        try:
            return await self.gw.agent_chat(req)
        except Exception as e:  # noqa: BLE001 - see _one_line
            raise _one_line(e, req) from None

    def agent_settings(self, role: str = "target") -> AgentSettings:
        return self.gw.agent_settings(role)

    def save_ledger(self) -> LedgerState:
        return self.gw.save_ledger()

    def ledger_snapshot(self) -> LedgerState:
        return self.gw.ledger_snapshot()

    async def stats(self) -> GatewayStats:
        out = self.gw.stats()
        retries, faults = out.setdefault("retries", {}), out.setdefault("faults", {})
        shards: list[GatewayStats] = await asyncio.gather(*(s.stats.remote() for s in self.gw.senders))
        for st in shards:  # retries happen in the shards
            for role, n in st.get("retries", {}).items():
                retries[role] = retries.get(role, 0) + n
            for role, kinds in st.get("faults", {}).items():
                mine = faults.setdefault(role, {})
                for kind, k in kinds.items():
                    mine[kind] = mine.get(kind, 0) + k
        return out

    async def close(self) -> None:
        await self.gw.close()
        for s in self.gw.senders:
            try:
                await s.close.remote()
            except Exception:  # noqa: BLE001 - a shard already gone
                pass
            sys.modules["ray"].kill(s, no_restart=True)  # senders exist only on Ray


@contextlib.contextmanager
def _unwrapped() -> Iterator[None]:
    """Re-raise an LLMError from the gateway actor as itself: Ray's wrapper matches `except LLMError` but its
    str() is the remote trace (ANSI colours, pid, actor id); the original's str() is the one-line message."""
    try:
        yield
    except Exception as e:
        ray_exceptions = sys.modules.get("ray.exceptions")  # only a call through Ray raises Ray's wrapper
        cause = getattr(e, "cause", None)
        if ray_exceptions is not None and isinstance(e, ray_exceptions.RayTaskError) and isinstance(cause, LLMError):
            raise cause from None
        raise


def _actor_died(e: BaseException) -> bool:
    ray_exceptions = sys.modules.get("ray.exceptions")
    return ray_exceptions is not None and isinstance(e, ray_exceptions.RayActorError)


def _ray_class(cls: type) -> Any:
    from skillopt_ray.base.ray_class import remote_class

    return remote_class(cls)


def __getattr__(name: str) -> Any:
    """`GatewayActor` and `SenderActor`: the Ray actor classes, made (and Ray imported) on first use."""
    plain = {"GatewayActor": GatewayHost, "SenderActor": Sender}.get(name)
    if plain is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _ray_class(plain)


class LLMHandle:
    """What stages and episodes hold: a thin async facade over a Gateway, a GatewayActor (Ray) or a gateway of the
    one-process engine (an object on its own event loop: its `ask(method, *args)` runs the method there)."""

    def __init__(self, target: Any):
        self._t = target
        self._remote = hasattr(target, "chat") and hasattr(target.chat, "remote")
        self._asks = not self._remote and callable(getattr(target, "ask", None))
        self._modes: dict[str, str] = {}  # structured-output mode per role: static config, fetched once
        # a gateway actor takes chat calls in batches (skillopt_ray/llm/callbox.py): one batcher per event loop
        self._batched = self._remote and hasattr(getattr(target, "submit", None), "remote")
        self._batcher: Optional[CallBatcher] = None

    async def _call(self, method: str, *args: Any) -> Any:
        """The gateway's `method`, wherever it runs."""
        if self._asks:
            return await self._t.ask(method, *args)
        if self._remote:
            with _unwrapped():
                return await getattr(self._t, method).remote(*args)
        out = getattr(self._t, method)(*args)
        return await out if inspect.isawaitable(out) else out

    async def chat(self, req: ChatRequest) -> ChatResult:
        if self._batched:
            if self._batcher is None or self._batcher.loop is not asyncio.get_running_loop():
                self._batcher = CallBatcher(self._t)
            return await self._batcher.call(req)
        return cast(ChatResult, await self._call("chat", req))

    def __getstate__(self) -> dict[str, object]:
        """A copy sent to another process starts its own batcher (and mailbox): two must never share one."""
        return {**self.__dict__, "_batcher": None}

    async def chat_json(self, req: ChatRequest, schema: Optional[JSONObject], name: str = "reply") -> JsonResult:
        return cast(JsonResult, await self._call("chat_json", req, schema, name))

    async def response_format_for(self, role: str, schema: JSONObject, name: str) -> Optional[ResponseFormat]:
        """Built here from the role's mode, so an episode turn costs one call to the gateway, not two."""
        if role not in self._modes:
            self._modes[role] = await self._call("structured_output_mode", role)
        return response_format(self._modes[role], schema, name)

    async def agent_chat(self, req: Any) -> Any:
        return await self._call("agent_chat", req)

    async def agent_settings(self, role: str = "target") -> AgentSettings:
        return cast(AgentSettings, await self._call("agent_settings", role))

    async def ledger_snapshot(self) -> LedgerState:
        return cast(LedgerState, await self._call("ledger_snapshot"))

    async def save_ledger(self) -> LedgerState:
        return cast(LedgerState, await self._call("save_ledger"))
