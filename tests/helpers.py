"""Helpers shared by test files (fixtures live in conftest.py): import them from here, never from another test file."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from aiohttp import web
from skillopt_envs.chat import ChatRequest

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.agent_api import message_object
from skillopt_ray.llm.gateway import Gateway


def checked(data: Any) -> Any:
    """A test's plain run config (as composed, perhaps edited by the test) through the run's one check pass
    (cli.preflight): what execute() and run_one() take."""
    from skillopt_ray import cli
    from skillopt_ray.config import from_container

    return cli.preflight(from_container(data))


def llm_config(llm: dict[str, Any]) -> Any:
    """The typed `llm` section the gateway actor takes, from a test's plain one (the defaults fill in)."""
    from skillopt_ray.config import from_container

    return from_container({"experiment": "_", "llm": llm}).llm


def echo_llm(url: str, **extra: Any) -> dict[str, Any]:
    """A plain `llm` section whose roles call the scripted server at `url` (no structured output)."""
    role = {
        "provider": "openai",
        "model": "scripted",
        "base_url": url,
        "structured_output": "none",
        "max_concurrency": 8,
    }
    return {"backend": "compatible", "target": role, "optimizer": role, **extra}


def echo_server(latency_s: float = 0.0) -> Any:
    """A scripted server that answers each call with `ok <its sample key>` (so a reply names its task)."""
    from scripted_server import ScriptedServer

    return ScriptedServer(policy=lambda body, headers: f"ok {headers.get('x-skillopt-key', '')}", latency_s=latency_s)


def _echo(body, headers):
    return json.dumps({"answer": body["messages"][-1]["content"]})


def gateway(url: str, cache=None, **kw) -> Gateway:
    r = role(url, **kw.pop("role", {}))
    cfg = LLMConfig(
        backend="compatible",
        target=r,
        optimizer=LLMRoleConfig(**vars(r)),
        retry_base_s=0.05,
        retry_max_s=0.2,
        retry_window_s=kw.pop("window", 10.0),
        max_retries=kw.pop("retries", 4),
        **kw,
    )
    return Gateway(cfg, cache)


def req(i=0, role_name="target", stage="rollout"):
    return ChatRequest(role_name, stage, [{"role": "user", "content": f"q{i}"}], key=f"k{i}")


class MessagesServer:
    """Answers POST /v1/messages from a queue of (status, reply) and keeps the bodies it got."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.bodies = []
        self.port = 0

    async def _messages(self, request):
        self.bodies.append(await request.json())
        status, reply = self.replies.pop(0)
        if status != 200:
            return web.json_response(
                {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, status=status
            )
        return web.json_response(message_object(reply, f"msg_{len(self.bodies)}", "claude-test"))

    def __enter__(self):
        ready = threading.Event()
        self.loop = asyncio.new_event_loop()

        def serve():
            asyncio.set_event_loop(self.loop)
            app = web.Application()
            app.router.add_post("/v1/messages", self._messages)
            self.runner = web.AppRunner(app)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def role(url: str, **kw) -> LLMRoleConfig:
    base = dict(provider="openai", model="m", base_url=url, timeout_s=5.0, temperature=0.0, max_tokens=64)
    base.update(kw)
    return LLMRoleConfig(**base)
