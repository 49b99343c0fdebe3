"""A killed command leaves no embedded model server behind, and the next run stops one an older command left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillopt_ray.base.lifeline import start_ticks

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

_STARTER = """
import sys, time
from skillopt_ray.llm.embedded import EmbeddedServer
srv = EmbeddedServer(ctx_size=512, parallel=1, threads=1)
srv.start()
print(srv.proc.pid, flush=True)
time.sleep(120)
"""


def _running(pid: int, start: str) -> bool:
    """Started at `start` and not a zombie (the container's first process may be slow to reap an orphan)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return start_ticks(pid) == start and state not in ("Z", "X")


def _gone_within(pid: int, start: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _running(pid, start):
            return True
        time.sleep(0.05)
    return False


def test_a_sigkilled_command_takes_its_embedded_server_with_it():
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    server_pid = 0
    try:
        server_pid = int(starter.stdout.readline())
        server_start = start_ticks(server_pid)
        assert server_start is not None
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        assert _gone_within(server_pid, server_start, 3.0), "the embedded server outlived its killed command"
    finally:
        if starter.poll() is None:
            starter.kill()
        if server_pid and start_ticks(server_pid) is not None:
            os.kill(server_pid, signal.SIGKILL)


def _server(env: dict[str, str]) -> subprocess.Popen:
    """An embedded server as an older command started it: no lifeline, so it stays when its starter ends."""
    from skillopt_ray.llm.embedded import default_model_path, free_port

    cmd = [sys.executable, "-m", "skillopt_ray.llm.embedded_server", "--model", str(default_model_path())]
    cmd += ["--port", str(free_port()), "--ctx", "256", "--parallel", "1", "--threads", "1"]
    return subprocess.Popen(
        cmd, env=dict(env, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def test_the_next_run_stops_an_orphaned_server_and_only_that_one():
    from skillopt_ray.llm.embedded_orphans import OWNER_ENV, owner_marker, reap_orphans

    ended = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    dead_owner = f"{ended.pid}:{start_ticks(ended.pid)}"
    ended.communicate(b"")  # its starter has ended (and was reaped)
    base = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
    orphan = _server(dict(base, **{OWNER_ENV: dead_owner}))
    owned = _server(dict(base, **{OWNER_ENV: owner_marker()}))  # its starter (this test) lives
    unmarked = _server(base)  # the same command line, not started by this project's code: not ours to judge
    procs = [orphan, owned, unmarked]
    try:
        time.sleep(1.0)
        assert all(p.poll() is None for p in procs)
        lines = reap_orphans()
        assert orphan.wait(timeout=10) is not None
        assert lines == [
            f"stopped an embedded model server (pid {orphan.pid}) left behind by a command that ended without "
            f"stopping it (pid {ended.pid})"
        ]
        assert owned.poll() is None and unmarked.poll() is None
        assert reap_orphans() == []
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
