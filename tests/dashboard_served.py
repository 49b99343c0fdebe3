"""Shared by the dashboard security tests: a dashboard app served by uvicorn in a thread, with a browser-like client."""

from __future__ import annotations

import socket
import threading
import time

import httpx

from skillopt_ray.dashboard.server import Dashboard, build_app

TOKEN = "t0k3n-for-the-tests"  # 16+ characters: the command refuses a shorter one


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A dashboard app on a uvicorn server in a thread, with a client that sends what a browser tab would."""

    def __init__(self, dash: Dashboard):
        import uvicorn

        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(build_app(dash), host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.dash = dash

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def auth(self, **more: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}", **more}

    def post(self, path: str, body: dict, headers: dict[str, str] | None = None) -> httpx.Response:
        h = self.auth(Origin=self.base) if headers is None else headers
        return httpx.post(self.base + path, json=body, headers=h, timeout=120)
