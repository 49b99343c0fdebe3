"""A scripted OpenAI-compatible server on 127.0.0.1 — a test double for tests and benchmarks only.

It answers through real HTTP, so the product's real `openai` client path is
exercised. Role policies are deterministic; knobs inject latency, HTTP errors
(with Retry-After), hangs and malformed JSON. It counts requests and tokens so
tests can check the ledger against the server's own numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from aiohttp import web

# a policy's reply: the content, or {"content": ..., "tool_calls": [{id, type, function: {name, arguments}}]}
Policy = Callable[[dict[str, Any], dict[str, str]], Any]


@dataclass
class Fault:
    status: int = 500
    retry_after: Optional[float] = None
    hang_s: float = 0.0  # sleep this long before answering (timeouts)
    malformed: bool = False  # answer 200 with text that is not JSON
    truncated: bool = False  # answer 200 with a chat-completion JSON body cut off halfway
    hang_up_midway: bool = False  # answer 200 announcing the whole reply's Content-Length, close after half of it
    trickle_s: float = 0.0  # answer 200 announcing Content-Length 1e9, then one byte every trickle_s (never ends)
    html: bool = False  # answer 200 with an HTML page (a proxy's or a web server's)
    reset: bool = False  # drop the connection without answering
    finish_reason: Optional[str] = None  # answer normally but with this finish_reason (length, content_filter)


@dataclass
class ServerState:
    requests: Counter = field(default_factory=Counter)  # (role, stage) -> count of answered 200s
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    request_times: list[float] = field(default_factory=list)
    faults: deque = field(default_factory=deque)
    bodies: deque = field(default_factory=lambda: deque(maxlen=50))  # the last request bodies, as sent
    paths: deque = field(default_factory=lambda: deque(maxlen=50))  # their paths with the query string
    refused: int = 0  # malformed requests (the client's liveness probes) answered 400, not counted as attempts


def count_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _stage_task_id(key: str) -> tuple[str, int]:
    """From a sample key `<prefix>/<task_id>/t<turn>` get (task_id, turn)."""
    m = re.search(r"/t(\d+)$", key)
    turn = int(m.group(1)) if m else 0
    body = key[: m.start()] if m else key
    parts = body.split("/")
    # task ids of ALFWorld walks look like split/folder/trial: the last three parts
    return "/".join(parts[-3:]), turn


class Policies:
    """Deterministic role policies. `walkthroughs` maps task_id -> winning actions."""

    def __init__(
        self,
        walkthroughs: Optional[dict[str, list[str]]] = None,
        target: str = "walkthrough",
        wander: int = 0,
        answers: Optional[dict[str, tuple[str, str, str]]] = None,
    ):
        self.walkthroughs = walkthroughs or {}
        self.target = target  # walkthrough | rule_gated | nonsense
        self.wander = wander
        # one-shot benchmarks (spreadsheets, QA): task_id -> (task_type, right reply, wrong reply)
        self.answers = answers or {}
        self.optimizer_log: list[tuple[str, str, list[dict[str, Any]]]] = []  # (stage, sample key, messages)

    def answer(self, body: dict[str, Any], headers: dict[str, str]) -> str:
        role = headers.get("x-skillopt-role", "")
        stage = headers.get("x-skillopt-stage", "")
        if role == "optimizer":  # what the optimizer was shown, for tests that check prompt contents
            self.optimizer_log.append((stage, headers.get("x-skillopt-key", ""), body["messages"]))
        if role == "target":
            return self.target_reply(body, headers.get("x-skillopt-key", ""))
        return self.optimizer_reply(stage, body)

    def target_reply(self, body: dict[str, Any], key: str) -> str:
        if self.target == "nonsense":
            return "I would rather talk about turtles."
        system = body["messages"][0]["content"]
        m = re.search(r"/([^/]+)/t\d+$", key)
        if self.answers and m and m.group(1) in self.answers:
            task_type, right, wrong = self.answers[m.group(1)]
            gated = self.target == "rule_gated" and f"RULE-{task_type}" not in system
            return wrong if gated else right
        task_id, turn = _stage_task_id(key)
        if self.target == "rule_gated":
            # ALFWorld: the skill is in the user message; the type is the reference's name for the game's folder
            from skillopt_envs.alfworld.data import task_type_of

            task_type = task_type_of(task_id.split("/")[1]) if "/" in task_id else ""
            prompt = "\n".join(str(msg.get("content") or "") for msg in body["messages"])
            if f"RULE-{task_type}" not in prompt:
                return "<action>look</action>"
        walk = self.walkthroughs.get(task_id, [])
        if turn < self.wander:
            return "<action>look</action>"
        i = turn - self.wander
        return f"<action>{walk[i]}</action>" if i < len(walk) else "<action>look</action>"

    def optimizer_reply(self, stage: str, body: dict[str, Any]) -> str:
        """Well-formed replies in the reference's JSON fields, read from the prompts the stages send.

        The analysts add one `RULE-<task type>` line per failing task type; merges union their inputs;
        ranking keeps every index in order. A stage it does not know is an error, never a guess."""
        system = body["messages"][0]["content"]
        prompt = body["messages"][-1]["content"]
        handler = getattr(self, f"_opt_{stage}", None)
        if handler is None:
            raise UnknownRequest(f"scripted server: no optimizer policy for stage {stage!r}")
        return json.dumps(handler(system, prompt))

    @staticmethod
    def _payload_key(system: str) -> str:
        if '"skill_candidates"' in system:
            return "skill_candidates"
        return "revise_suggestions" if '"revise_suggestions"' in system else "edits"

    def _opt_analyst(self, system: str, prompt: str) -> dict[str, Any]:
        failed = "## Failed Trajectories (" in prompt
        types = set(re.findall(r"^Task type: (\S+)$", prompt, re.M))
        # SearchQA's header shows an empty task type (quirk: searchqa-blank-header): one-shot tasks take theirs
        # from `answers`
        types |= {
            self.answers[i][0]
            for i in re.findall(r"^### Trajectory \d+ \(id=(.+)\)$", prompt, re.M)
            if i in self.answers
        }
        types = sorted(types)
        rules = [f"- RULE-{t}: plan the steps for {t} before acting." for t in types] if failed else []
        key = self._payload_key(system)
        if key == "skill_candidates":
            skill = prompt.split("## Current Skill\n", 1)[1].split("\n## Update Format", 1)[0].rstrip()
            items: list[Any] = (
                [{"title": "add rules", "change_summary": rules, "new_skill": skill + "\n" + "\n".join(rules)}]
                if rules
                else []
            )
        elif key == "revise_suggestions":
            items = [
                {
                    "type": "add_rule",
                    "title": r[2:20],
                    "motivation": "failures",
                    "instruction": r,
                    "priority_hint": "high",
                }
                for r in rules
            ]
        else:
            items = [{"op": "append", "content": r} for r in rules]
        n = len(re.findall(r"^### Trajectory \d+ ", prompt, re.M))
        out: dict[str, Any] = {"batch_size": n, "patch": {"reasoning": "scripted", key: items}}
        if failed:
            out["failure_summary"] = [
                {"failure_type": "rule_missing", "count": n, "description": f"no rule for {t}"} for t in types
            ]
        else:
            out["success_patterns"] = ["followed the rules"]
        if '"appendix_notes"' in system:
            out["appendix_notes"] = [f"Double-check the goal object for {t}." for t in types] if failed else []
        return out

    def _opt_merge(self, system: str, prompt: str) -> dict[str, Any]:
        key = self._payload_key(system)
        if "## Patches to merge (" in prompt:
            patches = json.loads(prompt.split("## Patches to merge (", 1)[1].split("\n", 1)[1])
        else:
            patches = json.loads(prompt.split("## Two pre-merged", 1)[1].split("\n\n", 1)[1])
        merged, seen = [], set()
        for p in patches:
            for it in p.get(key, []):
                k = json.dumps(
                    {f: it.get(f) for f in ("op", "target", "content", "title", "instruction", "new_skill")},
                    sort_keys=True,
                )
                if k not in seen:
                    seen.add(k)
                    merged.append({f: v for f, v in it.items() if f != "merge_level"})
        if key == "skill_candidates":
            merged = merged[:1]
        return {"reasoning": "scripted union", key: merged}

    @staticmethod
    def _opt_ranking(system: str, prompt: str) -> dict[str, Any]:
        return {"reasoning": "in order", "selected_indices": list(range(len(re.findall(r"^\[\d+\] ", prompt, re.M))))}

    @staticmethod
    def _opt_lr_autonomous(system: str, prompt: str) -> dict[str, Any]:
        n = int(re.search(r"^proposed_update_items=(\d+)$", prompt, re.M).group(1))  # type: ignore[union-attr]
        return {"learning_rate": n, "reasoning": "apply all", "confidence": "high", "risk_notes": []}

    @staticmethod
    def _opt_rewrite(system: str, prompt: str) -> dict[str, Any]:
        skill = prompt.split("## Current Skill\n", 1)[1].split("\n\n## Selected Revise Suggestions", 1)[0]
        sugg = json.loads(
            prompt.split("## Selected Revise Suggestions", 1)[1]
            .split("\n", 1)[1]
            .split("\n\n## ", 1)[0]
            .split("\n\nReturn", 1)[0]
        )
        return {
            "reasoning": "scripted",
            "change_summary": ["rules added"],
            "new_skill": skill.rstrip() + "\n" + "\n".join(s["instruction"] for s in sugg),
        }

    @staticmethod
    def _opt_slow_update(system: str, prompt: str) -> dict[str, Any]:
        return {
            "reasoning": "scripted",
            "slow_update_content": "Keep following the per-task-type rules; they fixed earlier failures.",
        }

    @staticmethod
    def _opt_meta_skill(system: str, prompt: str) -> dict[str, Any]:
        return {
            "reasoning": "scripted",
            "meta_skill_content": "Appending one rule per failing task type is accepted by the gate.",
        }

    @staticmethod
    def _opt_appendix_consolidate(system: str, prompt: str) -> dict[str, Any]:
        return {"appendix_notes": re.findall(r"^\d+\. (.*)$", prompt, re.M)[:3]}


class UnknownRequest(ValueError):
    """The scripted server was asked something no policy answers: the test is wrong, say so loudly."""


class ScriptedServer:
    def __init__(
        self,
        policies: Optional[Policies] = None,
        latency_s: float = 0.0,
        policy: Optional[Policy] = None,
        reasoning_model: bool = False,
    ):
        self.policies = policies or Policies()
        # answer as the real API does for reasoning models (gpt-5.x, o-series): 400 for max_tokens or a temperature other than 1
        self.reasoning_model = reasoning_model
        self.policy = policy
        self.latency_s = latency_s
        self.route_hang_s = 0.0  # every chat / responses request (probes too) waits this long; /v1/models answers
        self.reasoning_tokens = 8  # Responses replies: reasoning tokens added to the output when an effort is sent
        self.cached_tokens = 0  # Responses replies: prompt tokens reported as served from the prompt cache
        self.state = ServerState()
        self.port = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._runner: Optional[web.AppRunner] = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def inject(self, *faults: Fault) -> None:
        self.state.faults.extend(faults)

    async def _chat(self, request: web.Request) -> web.Response:
        return await self._serve(request, "chat")

    async def _responses(self, request: web.Request) -> web.Response:
        """POST /v1/responses: the same policies and faults, asked and answered in the Responses shape."""
        return await self._serve(request, "responses")

    async def _serve(self, request: web.Request, api: str) -> web.Response:
        st = self.state
        hang_until = time.monotonic() + self.route_hang_s
        while self.route_hang_s and time.monotonic() < hang_until:  # ends early when the server stops
            await asyncio.sleep(0.05)
        body = await request.json()
        accepted = (list,) if api == "chat" else (list, str)  # chat messages; a Responses input may be plain text
        if not isinstance(body.get("messages" if api == "chat" else "input", []), accepted):
            st.refused += 1  # as a real server: a request with messages (input) of the wrong type is refused at once
            return web.json_response(
                {"error": {"message": "malformed request", "type": "invalid_request_error"}}, status=400
            )
        st.attempts += 1
        st.bodies.append(body)
        st.paths.append(request.path_qs)
        chat_body = body if api == "chat" else {**body, "messages": responses_messages(body)}
        headers = {k.lower(): v for k, v in request.headers.items()}
        if self.reasoning_model:
            refused = _reasoning_model_refusal(body)
            if refused is not None:
                return web.json_response({"error": refused}, status=400)
        f: Optional[Fault] = st.faults.popleft() if st.faults else None
        if f is not None:
            early = await self._fault_response(request, f)
            if early is not None:
                return early
        st.in_flight += 1
        st.peak_in_flight = max(st.peak_in_flight, st.in_flight)
        st.request_times.append(time.monotonic())
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            if f is not None and f.malformed:
                content = "this is not JSON at all"
            else:
                try:
                    content = (
                        self.policy(chat_body, headers) if self.policy else self.policies.answer(chat_body, headers)
                    )
                except UnknownRequest as e:
                    return web.json_response(
                        {"error": {"message": str(e), "type": "invalid_request_error"}}, status=400
                    )
        finally:
            st.in_flight -= 1
        tool_calls = None
        if isinstance(content, dict):  # a reply that calls tools
            tool_calls = content.get("tool_calls") or None
            content = content.get("content") or ""
        if f is not None and f.trickle_s:
            return await self._trickle(request, f.trickle_s)
        if f is not None and f.hang_up_midway:  # billed by the server, never read whole by the client
            return await self._hang_up_midway(request, api, body, content, tool_calls)
        if f is not None and f.truncated:  # cut before the usage: not counted as answered, as the client never sees it
            text = json.dumps(
                {
                    "id": "chatcmpl-cut",
                    "object": "chat.completion",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                    ],
                }
            )
            return web.Response(text=text[: len(text) // 2], content_type="application/json")
        pt = sum(count_tokens(m.get("content") or "") for m in chat_body["messages"])
        if chat_body.get("tools"):  # a real endpoint bills the tool definitions as prompt tokens too
            pt += count_tokens(json.dumps(chat_body["tools"]))
        ct = count_tokens(content)
        st.prompt_tokens += pt
        st.completion_tokens += ct
        st.requests[(headers.get("x-skillopt-role", ""), headers.get("x-skillopt-stage", ""))] += 1
        finish = f.finish_reason if f is not None and f.finish_reason else ("tool_calls" if tool_calls else "stop")
        if api == "responses":
            return web.json_response(self._responses_reply(body, content, tool_calls, finish, pt, ct))
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        reply = {
            "id": f"chatcmpl-{st.attempts}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
        }
        return web.json_response(reply)

    async def _hang_up_midway(
        self, request: web.Request, api: str, body: dict[str, Any], content: str, tool_calls: Any
    ) -> web.StreamResponse:
        """The whole reply's headers (Content-Length included) and half its body, then the connection closes."""
        if api == "responses":
            reply: dict[str, Any] = self._responses_reply(body, content, tool_calls, "stop", 1, 1)
        else:
            message = {"role": "assistant", "content": content}
            reply = {"id": "chatcmpl-cut", "object": "chat.completion", "model": body.get("model", "scripted"),
                     "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip
        data = json.dumps(reply).encode()
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.content_length = len(data)
        await resp.prepare(request)
        await resp.write(data[: len(data) // 2])
        request.transport.close()  # type: ignore[union-attr]
        raise asyncio.CancelledError()

    async def _trickle(self, request: web.Request, every_s: float) -> web.StreamResponse:
        """Headers announcing a 1e9-byte body, then one byte every `every_s` until the client or the server stops."""
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.content_length = 10**9
        await resp.prepare(request)
        await resp.write(b"{")
        with contextlib.suppress(ConnectionError, RuntimeError):  # the client hung up
            for _ in range(int(300 / every_s)):
                await asyncio.sleep(every_s)
                await resp.write(b" ")
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError()

    async def _fault_response(self, request: web.Request, f: Fault) -> Optional[web.Response]:
        """What an injected fault answers before any policy runs (None: the fault shapes the reply instead)."""
        if f.hang_s:
            await asyncio.sleep(f.hang_s)
        if f.reset:
            request.transport.abort()  # type: ignore[union-attr]
            raise asyncio.CancelledError()
        if f.html:
            return web.Response(
                text="<html><head><title>Welcome</title></head><body>It works!</body></html>",
                content_type="text/html",
            )
        if not (f.malformed or f.truncated or f.finish_reason or f.hang_up_midway or f.trickle_s):
            h = {"Retry-After": str(f.retry_after)} if f.retry_after is not None else {}
            return web.json_response(
                {"error": {"message": f"injected {f.status}", "type": "injected"}}, status=f.status, headers=h
            )
        return None

    def _responses_reply(
        self, body: dict[str, Any], content: str, tool_calls: Any, finish: str, pt: int, ct: int
    ) -> dict[str, Any]:
        """A Responses reply: a reasoning item when a summary was asked, the message, function_call items; usage
        with `reasoning_tokens` (of the output, when an effort was sent) and `cached_tokens` (this server's knob)."""
        reasoning = body.get("reasoning") or {}
        output: list[dict[str, Any]] = []
        if reasoning.get("summary"):
            output.append(
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "scripted reasoning"}]}
            )
        if content or not tool_calls:
            output.append(
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": content, "annotations": []}],
                }
            )
        for i, c in enumerate(tool_calls or []):
            fn = c.get("function") or {}
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{i}",
                    "call_id": c.get("id") or f"call_{i}",
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments") or "{}",
                    "status": "completed",
                }
            )
        rt = self.reasoning_tokens if reasoning.get("effort") else 0
        self.state.completion_tokens += rt
        incomplete = {"length": "max_output_tokens", "content_filter": "content_filter"}.get(finish)
        return {
            "id": f"resp_{self.state.attempts}",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "scripted"),
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "output": output,
            "usage": {
                "input_tokens": pt,
                "input_tokens_details": {"cached_tokens": min(self.cached_tokens, pt)},
                "output_tokens": ct + rt,
                "output_tokens_details": {"reasoning_tokens": rt},
                "total_tokens": pt + ct + rt,
            },
        }

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    def start(self) -> str:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_post("/v1/chat/completions", self._chat)
            app.router.add_post("/v1/responses", self._responses)
            app.router.add_post("/openai/responses", self._responses)  # Azure OpenAI's path for it
            app.router.add_get("/v1/models", self._models)
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self.base_url

    def stop(self) -> None:
        self.route_hang_s = 0.0
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> ScriptedServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _chat_part(part: Any) -> Any:
    """A Responses content part as the chat part a policy reads."""
    if isinstance(part, dict) and part.get("type") in ("input_text", "output_text"):
        return {"type": "text", "text": part.get("text", "")}
    if isinstance(part, dict) and part.get("type") == "input_image":
        return {"type": "image_url", "image_url": {"url": part.get("image_url"), "detail": part.get("detail")}}
    return part


def responses_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses request's input as chat messages, so the chat policies answer both APIs alike."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    if body.get("instructions"):
        out.append({"role": "system", "content": body["instructions"]})
    for it in items or []:
        kind = it.get("type", "message")
        if kind == "function_call":
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": ""})
            call = {
                "id": it["call_id"],
                "type": "function",
                "function": {"name": it["name"], "arguments": it["arguments"]},
            }
            out[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": it["call_id"], "content": it["output"]})
        else:
            c = it.get("content")
            out.append({"role": it["role"], "content": c if isinstance(c, str) else [_chat_part(p) for p in c]})
    return out


def _reasoning_model_refusal(body: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The error object the real API returns for parameters reasoning models do not take (None: accepted)."""
    if "max_tokens" in body:
        return {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    t = body.get("temperature")
    if t is not None and t != 1:
        return {
            "message": f"Unsupported value: 'temperature' does not support {t} with this model. Only the default (1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    return None


def alfworld_walkthroughs(tasks: list[Any]) -> dict[str, list[str]]:
    from skillopt_envs.alfworld.game import read_walkthrough

    return {t.task_id: read_walkthrough(t.payload["gamefile"]) for t in tasks}


def main() -> None:
    """Serve from the command line (for `ray job submit` tests and benchmarks): prints the base URL."""
    import argparse
    import signal

    from skillopt_envs.alfworld.data import walk_split

    ap = argparse.ArgumentParser()
    ap.add_argument("--alfworld-root", default=None)
    ap.add_argument("--target", default="walkthrough")
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--wander", type=int, default=0)
    a = ap.parse_args()
    walks: dict[str, list[str]] = {}
    if a.alfworld_root:
        from pathlib import Path

        walks = alfworld_walkthroughs(walk_split(Path(a.alfworld_root), "all"))
    srv = ScriptedServer(Policies(walks, a.target, a.wander), latency_s=a.latency)
    print(srv.start(), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    srv.stop()


if __name__ == "__main__":
    main()
