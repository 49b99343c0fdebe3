"""Embedded model servers left behind by a command that was killed, found and stopped by the next run.

A server started by EmbeddedServer runs `python -m skillopt_ray.llm.embedded_server` and carries its starter's
identity (pid and start time) in its environment. It exits by itself when its starter dies (a lifeline pipe, see
skillopt_ray/base/lifeline.py); one that did not (frozen, or started by an older version that had no lifeline but the
marker) is an orphan when its starter has ended. We stop only such processes: this user's, running that module,
carrying the marker, whose starter is gone. A process that merely looks like one (the same command line without
the marker, or a live starter) is left alone.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Optional

from skillopt_ray.base.lifeline import running, start_ticks

OWNER_ENV = "SKILLOPT_EMBEDDED_OWNER"
MODULE = "skillopt_ray.llm.embedded_server"


@dataclass(frozen=True)
class Orphan:
    pid: int
    start: str
    owner_pid: int


def owner_marker() -> str:
    """This process as the starter a server names in its environment: "pid:start ticks"."""
    return f"{os.getpid()}:{start_ticks(os.getpid())}"


def parse_marker(value: Optional[str]) -> Optional[tuple[int, str]]:
    pid, sep, start = (value or "").partition(":")
    return (int(pid), start) if sep and pid.isdigit() and start.isdigit() else None


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone meanwhile, or not ours to read
        return None


def _marker_of(pid: int) -> Optional[tuple[int, str]]:
    """The starter named in the environment of `pid`, if it runs the embedded server module with the marker."""
    argv = (_read(f"/proc/{pid}/cmdline") or b"").split(b"\0")
    if b"-m" not in argv or argv.index(b"-m") + 1 >= len(argv) or argv[argv.index(b"-m") + 1] != MODULE.encode():
        return None
    prefix = OWNER_ENV.encode() + b"="
    for var in (_read(f"/proc/{pid}/environ") or b"").split(b"\0"):
        if var.startswith(prefix):
            return parse_marker(var[len(prefix) :].decode("ascii", "replace"))
    return None


def find_orphans() -> list[Orphan]:
    """This user's embedded servers whose starter has ended (none where /proc cannot be read)."""
    found = []
    try:
        pids = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            if pid == os.getpid() or os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
        except OSError:
            continue
        owner = _marker_of(pid)
        start = start_ticks(pid)
        if owner is None or start is None or running(*owner) or not running(pid, start):
            continue
        found.append(Orphan(pid, start, owner[0]))
    return found


def stop(orphan: Orphan, grace_s: float = 5.0) -> None:
    """SIGTERM (the server's own clean stop), SIGKILL after `grace_s`; each signal only if it is still that process."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        if not running(orphan.pid, orphan.start):
            return
        try:
            os.kill(orphan.pid, sig)
        except OSError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and running(orphan.pid, orphan.start):
            time.sleep(0.05)


def reap_orphans() -> list[str]:
    """Stop every orphaned embedded server; one line for each, saying what was stopped and why."""
    lines = []
    for o in find_orphans():
        stop(o)
        lines.append(
            f"stopped an embedded model server (pid {o.pid}) left behind by a command that ended without stopping "
            f"it (pid {o.owner_pid})"
        )
    return lines
