"""Processes that must not outlive the one that started the run.

When the CLI (or a sweep trial) is killed, Ray tears its actors down only after it notices,
and until then the LLM gateway keeps sending queued requests: paid calls nobody will read.
Each actor that can start paid work watches its owners' processes (the CLI and the driver
actor) and exits at once when one is gone: a `/proc` check every 0.1 s, so new calls stop
well within a second of the owner's death.

An owner is named by pid, the process start time (a reused pid is not the same process) and
the Ray node it runs on: on another node its pid means nothing there, and Ray's own owner
tracking is what stops the actor. A process that has exited but is not yet reaped (a zombie, for
a second or two after a SIGKILL) has ended: it counts as gone.

A child process outside Ray (the embedded model server) holds the read end of a lifeline pipe
whose write end only its starter holds: the kernel closes it when the starter dies, however it
dies, and the child sees end-of-file at once (`hold`).
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Optional, TypedDict

POLL_S = 0.1
EXIT_OWNER_GONE = 70


def _stat(pid: int) -> Optional[list[str]]:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state, first); None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw.rsplit(")", 1)[-1].split()  # the command name may hold spaces and parentheses


def start_ticks(pid: int) -> Optional[str]:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); None when the process is gone."""
    rest = _stat(pid)
    return rest[19] if rest and len(rest) > 19 else None


def running(pid: int, start: Optional[str]) -> bool:
    """Whether the process `pid` started at `start` still runs: not gone, not another process with its pid, and
    not a zombie (exited, its parent not yet told: it holds no more resources and will never answer)."""
    rest = _stat(pid) or []
    return len(rest) > 19 and rest[19] == start and rest[0] not in ("Z", "X")


def _node_id() -> Optional[str]:
    ray = sys.modules.get("ray")  # never imported for this: a process without Ray (the one-process engine) has no node
    if ray is None:
        return None
    try:
        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - outside Ray (unit tests, plain scripts): no node to compare
        return None


class _OwnerBase(TypedDict):
    pid: int
    start: str  # field 22 of /proc/<pid>/stat


class Owner(_OwnerBase, total=False):
    """A process others watch (lifeline.watch): its pid, its start time (so a reused pid is not it) and its node."""

    node: Optional[str]  # the Ray node id; None outside Ray (a lifeline's starter names no node)


def identity(pid: Optional[int] = None) -> Optional[Owner]:
    """This process (or `pid`) as an owner others can watch; None where /proc is not available."""
    pid = os.getpid() if pid is None else pid
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    return Owner(pid=pid, start=ticks, node=_node_id())


def alive(owner: Owner) -> bool:
    return running(int(owner["pid"]), owner["start"])


def watch(owners: Sequence[Optional[Owner]], what: str, poll_s: float = POLL_S) -> bool:
    """Exit this process as soon as one of `owners` on this node has ended. Returns whether any is watched."""
    here = _node_id()
    mine = os.getpid()
    watched = [o for o in owners if o and o.get("node") == here and int(o["pid"]) != mine]
    if not watched:
        return False
    gone = [o for o in watched if not alive(o)]
    if gone:
        _exit(what, gone[0])

    def loop() -> None:
        while True:
            time.sleep(poll_s)
            for o in watched:
                if not alive(o):
                    _exit(what, o)

    threading.Thread(target=loop, name="skillopt-lifeline", daemon=True).start()
    return True


def _exit(what: str, owner: Owner) -> None:
    try:
        sys.stderr.write(
            f"{what} (pid {os.getpid()}): owner process {owner['pid']} has ended; exiting so no new paid calls start\n"
        )
        sys.stderr.flush()
    finally:
        os._exit(EXIT_OWNER_GONE)


def pipe() -> tuple[int, int]:
    """A lifeline for a child process: (read end, to pass to it with `pass_fds`; write end, for the starter to
    keep open for as long as it lives). Both ends are non-inheritable, so no other child keeps the write end."""
    return os.pipe()


def hold(fd: int, owner: Optional[Owner], on_gone: Callable[[str], None], poll_s: float = 1.0) -> None:
    """Call `on_gone(why)` (on a thread) when the lifeline `fd` reaches end-of-file, or, should a process that
    inherited its write end outlive the starter, when the starter `owner` has ended (checked every `poll_s`)."""

    def loop() -> None:
        while True:
            ready, _, _ = select.select([fd], [], [], poll_s)
            if ready and not os.read(fd, 64):
                return on_gone("the process that started it has ended (its lifeline closed)")
            if owner is not None and not alive(owner):
                return on_gone(f"the process that started it (pid {owner['pid']}) has ended")

    threading.Thread(target=loop, name="skillopt-lifeline", daemon=True).start()
