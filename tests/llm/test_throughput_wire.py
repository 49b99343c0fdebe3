"""The gateway's fast request path sends what the SDK's typed `chat.completions.create` sends.

RoleEndpoint posts its body through the SDK client's own `post` (skipping the SDK's per-message walk over its
typed parameters, the largest share of the gateway's CPU per call). These tests capture what reaches a server
from both paths, for the request shapes the runner makes, on both HTTP clients: the same JSON value (the SDK
orders the keys its own way), the same path and the same headers.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from aiohttp import web
from skillopt_envs.chat import ChatRequest

from skillopt_ray.config import from_container
from skillopt_ray.llm.client import RetryPolicy, RoleEndpoint

REPLY = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 2},
}

# headers that differ between any two requests whatever sends them
VARYING = {"content-length", "x-stainless-read-timeout", "x-stainless-raw-response"}


class Capture:
    """A tiny OpenAI-shaped server on 127.0.0.1 that keeps each request's raw body and headers."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, dict[str, str], str]] = []
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    async def _handle(self, request: web.Request) -> web.Response:
        self.seen.append((await request.read(), {k.lower(): v for k, v in request.headers.items()}, request.path_qs))
        return web.json_response(REPLY)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture()
def capture():
    c = Capture()
    yield c
    c.stop()


def _endpoint(url: str, http_client: str, **extra: Any) -> RoleEndpoint:
    role = {"provider": "openai", "model": "m", "base_url": url, "http_client": http_client, **extra}
    cfg = from_container({"experiment": "_", "llm": {"backend": "compatible", "target": role, "optimizer": role}}).llm
    return RoleEndpoint("target", cfg.target, RetryPolicy.from_config(cfg))


TOOL = {
    "type": "function",
    "function": {"name": "look", "description": "d", "parameters": {"type": "object", "properties": {}}},
}
REQUESTS = [
    ChatRequest(
        "target", "rollout", [{"role": "system", "content": "s"}, {"role": "user", "content": "héllo ✓"}], "k1"
    ),
    ChatRequest(
        "target",
        "rollout",
        [{"role": "user", "content": "q"}],
        "k2",
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
        max_tokens=77,
        temperature=0.3,
    ),
    ChatRequest(
        "target",
        "rollout",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "page"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "look", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "seen"},
        ],
        "k3",
        tools=[TOOL],
        tool_choice="auto",
    ),
]


async def _both_paths(ep: RoleEndpoint, req: ChatRequest) -> None:
    """The request once through the endpoint, once through the SDK's typed create with the same body."""
    comp = await ep.send(req)
    assert comp.content == "hello" and comp.prompt_tokens == 7 and comp.completion_tokens == 2
    kw = ep.request_kwargs(req)
    headers = {"X-SkillOpt-Role": req.role, "X-SkillOpt-Stage": req.stage, "X-SkillOpt-Key": req.key}
    await ep.client.chat.completions.with_raw_response.create(**kw, extra_headers=headers)


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
@pytest.mark.parametrize("extra", [{}, {"max_completion_tokens": 50, "thinking_wire": "minimax"}])
def test_post_sends_what_create_sends(capture, http_client, extra):
    ep = _endpoint(f"http://127.0.0.1:{capture.port}/v1", http_client, **extra)

    async def go() -> None:
        for req in REQUESTS:
            await _both_paths(ep, req)
        await ep.close()

    asyncio.run(go())
    assert len(capture.seen) == 2 * len(REQUESTS)
    for i in range(0, len(capture.seen), 2):
        (ours, our_headers, our_path), (sdk, sdk_headers, sdk_path) = capture.seen[i], capture.seen[i + 1]
        assert json.loads(ours) == json.loads(sdk)
        assert our_path == sdk_path == "/v1/chat/completions"
        trimmed = {k: v for k, v in our_headers.items() if k not in VARYING}
        assert trimmed == {k: v for k, v in sdk_headers.items() if k not in VARYING}
        assert our_headers["authorization"].startswith("Bearer ")
        assert our_headers["x-skillopt-key"] == REQUESTS[i // 2].key
    bodies = [json.loads(b) for b, _, _ in capture.seen[::2]]
    assert bodies[1]["response_format"]["type"] == "json_schema" and bodies[2]["tools"][0]["function"]["name"] == "look"
    if extra:
        assert bodies[0]["thinking"] == {"type": "disabled"} and bodies[0]["max_completion_tokens"] == 50


def test_http_errors_still_raise_the_sdk_status_error(capture):
    """A 4xx from the server reaches the retry policy as the SDK's status error, as through create."""
    import openai

    ep = _endpoint(f"http://127.0.0.1:{capture.port}/v1/nowhere", "aiohttp")

    async def go() -> None:
        try:
            with pytest.raises(Exception) as info:
                await ep._post(ep.request_kwargs(REQUESTS[0]), {})
            assert isinstance(info.value, openai.APIStatusError) and info.value.status_code == 404
        finally:
            await ep.close()

    asyncio.run(go())
