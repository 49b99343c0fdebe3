"""Look at a run the way a user does: serve a tracking store with `mlflow server` and take headless-Chromium
screenshots of the experiment page, the run's metric charts and the skill history in the artifact viewer.

    .venv/bin/python scripts/mlflow_screenshot.py --tracking-uri sqlite:///$PWD/outputs/mlflow.db --out /tmp/shots
    [--run-id ID] [--port 5077] [--chromium chromium]

Needs Chromium (Debian: `apt-get install chromium`). Prints the PNG paths; nothing is left running.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mlflow server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"mlflow server at {base} did not answer within {timeout_s:.0f}s")


class Browser:
    """Headless Chromium driven over the DevTools protocol: load a page, wait in real time (the UI fetches runs,
    metrics and artifacts after it loads, and renders HTML artifacts in an iframe), then capture the viewport."""

    def __init__(self, chromium: str, width: int, height: int):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                f"--window-size={width},{height}",
                f"--remote-debugging-port={self.port}",
                "--remote-allow-origins=*",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _page_ws(self) -> str:
        import json

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=2) as r:
                    pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
                if pages:
                    return pages[0]["webSocketDebuggerUrl"]
            except OSError:
                pass
            time.sleep(0.3)
        raise SystemExit("Chromium's DevTools endpoint did not come up")

    def shoot(self, url: str, png: Path, wait_s: float) -> None:
        import asyncio
        import base64
        import itertools

        import aiohttp

        async def go() -> None:
            ids = itertools.count(1)
            async with aiohttp.ClientSession() as session, session.ws_connect(self._page_ws(), max_msg_size=0) as ws:

                async def call(method: str, **params: object) -> dict:
                    i = next(ids)
                    await ws.send_json({"id": i, "method": method, "params": params})
                    async for msg in ws:
                        data = msg.json()
                        if data.get("id") == i:
                            return data.get("result", {})
                    raise SystemExit("Chromium closed the DevTools connection")

                await call("Page.enable")
                await call("Page.navigate", url=url)
                await asyncio.sleep(wait_s)
                shot = await call("Page.captureScreenshot", format="png")
                png.write_bytes(base64.b64decode(shot["data"]))

        asyncio.run(go())

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tracking-uri", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--run-id", help="default: the newest run")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--wait-s", type=float, default=15.0, help="seconds each page gets to load before the screenshot")
    a = ap.parse_args(argv)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(a.tracking_uri)
    if a.run_id:
        run = client.get_run(a.run_id)
    else:
        exps = [e.experiment_id for e in client.search_experiments()]
        runs = client.search_runs(exps, order_by=["attributes.start_time DESC"], max_results=1)
        if not runs:
            print(f"no runs in {a.tracking_uri}", file=sys.stderr)
            return 2
        run = runs[0]
    exp, rid = run.info.experiment_id, run.info.run_id
    a.out.mkdir(parents=True, exist_ok=True)
    port = a.port or free_port()
    base = f"http://127.0.0.1:{port}"
    mlflow_bin = str(Path(sys.executable).with_name("mlflow"))
    proc = subprocess.Popen(
        [
            mlflow_bin,
            "server",
            "--backend-store-uri",
            a.tracking_uri,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(base, proc)
        ml = "?workflowType=machine_learning"  # MLflow 3's UI defaults to its GenAI view; this opens model training
        pages = {
            "experiment": f"{base}/#/experiments/{exp}{ml}",
            "run_metrics": f"{base}/#/experiments/{exp}/runs/{rid}/model-metrics{ml}",
            "skill_history": f"{base}/#/experiments/{exp}/runs/{rid}/artifacts/skill_history.html{ml}",
            "experiment_runs": f"{base}/#/experiments/{exp}/runs{ml}",  # the link a run prints for its experiment
            "experiments_list": f"{base}/#/experiments{ml}",
        }
        browser = Browser(a.chromium, a.width, a.height)
        try:
            for name, url in pages.items():
                png = a.out / f"{name}.png"
                browser.shoot(url, png, a.wait_s)
                print(f"{name}: {png}  ({url})")
        finally:
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
