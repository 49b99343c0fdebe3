"""The command's progress call asks the gateway for its ledger; in one process, when the run ends and the gateway
stops with that call in it, the call is cancelled where it ran. That must read as "the gateway is gone" (the last
snapshot stands), never end a finished run's command with a CancelledError traceback; a Ctrl-C still cancels."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from skillopt_ray.engine.driver import ledger_snapshot
from skillopt_ray.engine.executor import LocalActor, LocalExecutor


class StuckGateway:
    """A gateway whose ledger snapshot never returns (as one still answering when the run stops it)."""

    def __init__(self, started: threading.Event):
        self.started = started

    async def ledger_snapshot(self) -> dict:
        self.started.set()
        await asyncio.Event().wait()
        return {}


@pytest.fixture
def stuck() -> Iterator[tuple[LocalActor, threading.Event]]:
    """A one-process gateway stuck in its ledger snapshot, and the event set once a call is in it."""
    started = threading.Event()
    gateway = LocalActor(StuckGateway, (started,), {})
    try:
        yield gateway, started
    finally:
        gateway.stop()


async def snapshot_in_flight(gateway: LocalActor, started: threading.Event) -> asyncio.Future:
    """The command's progress call, once it is inside the gateway."""
    call = asyncio.ensure_future(ledger_snapshot(LocalExecutor(), gateway))
    await asyncio.to_thread(started.wait)
    return call


def test_a_snapshot_cut_by_the_gateways_stop_reads_as_gone(stuck):
    gateway, started = stuck

    async def drive() -> object:
        call = await snapshot_in_flight(gateway, started)
        gateway.stop()  # the run's end: the call in it is cancelled on the gateway's loop
        return await call

    assert asyncio.run(drive()) is None


def test_the_callers_own_cancel_still_propagates(stuck):
    async def drive() -> None:
        call = await snapshot_in_flight(*stuck)
        call.cancel()  # Ctrl-C: the command's own task is cancelled
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(drive())
