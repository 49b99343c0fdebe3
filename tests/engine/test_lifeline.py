"""Actors exit within a second of their owner's death, so a killed CLI starts no more paid calls."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from skillopt_ray.base.lifeline import EXIT_OWNER_GONE, alive, identity

REPO = Path(__file__).resolve().parents[2]

_WATCHER = """
import json, sys, time
from skillopt_ray.base.lifeline import watch
print(watch([json.loads(sys.argv[1])], "test watcher"), flush=True)
time.sleep(60)
"""


def test_a_watcher_exits_within_a_second_of_its_owner_and_a_reused_pid_is_not_the_owner():
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ident = identity(owner.pid)
    assert ident is not None and alive(ident)
    ident["node"] = None  # the watcher runs outside Ray; this process may have joined a cluster in an earlier test
    import json

    w = subprocess.Popen(
        [sys.executable, "-c", _WATCHER, json.dumps(ident)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    try:
        assert w.stdout.readline().strip() == "True"
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        rc = w.wait(timeout=30)  # it notices in ~0.1 s; a busy machine may take longer to run it
        assert rc == EXIT_OWNER_GONE
        assert f"owner process {owner.pid} has ended" in w.stderr.read()
    finally:
        for p in (owner, w):
            if p.poll() is None:
                p.kill()
    assert not alive(ident)
    assert not alive({**identity(), "start": "0"})  # same pid, another start time: not the same process


def test_an_owner_that_exited_but_is_not_yet_reaped_has_ended():
    """A SIGKILLed process stays a zombie until its parent waits for it (1.5-2 s for a killed kept-cluster holder):
    it will never answer again, so it is not alive."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ident = identity(child.pid)
    assert ident is not None and alive(ident)
    child.send_signal(signal.SIGKILL)
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert not alive(ident)  # a zombie: exited, not yet waited for
    finally:
        child.wait()
