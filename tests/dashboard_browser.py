"""Shared by the browser tests of the dashboard: the Chromium binary, the command that serves a dashboard and the wait for it."""

from __future__ import annotations

import shutil
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


TOKEN = "browser-test-token"


def _dashboard_cmd(port: int, outputs: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "skillopt_ray.dashboard",
        "--port",
        str(port),
        "--outputs",
        str(outputs),
        "--token",
        TOKEN,
    ]


def _wait_http(url: str, timeout: float = 60.0, token: str = "") -> None:
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
