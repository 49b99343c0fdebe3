"""The command's progress call asks the gateway for its ledger; in one process, when the run ends and the gateway
stops with that call in it, the call is cancelled where it ran. That must read as "the gateway is gone" (the last
snapshot stands), never end a finished run's command with a CancelledError traceback; a Ctrl-C still cancels."""

from __future__ import annotations

import asyncio
import threading

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


def test_a_snapshot_cut_by_the_gateways_stop_reads_as_gone():
    started = threading.Event()
    gateway = LocalActor(StuckGateway, (started,), {})

    async def drive() -> object:
        call = asyncio.ensure_future(ledger_snapshot(LocalExecutor(), gateway))
        await asyncio.to_thread(started.wait)
        gateway.stop()  # the run's end: the call in it is cancelled on the gateway's loop
        return await call

    try:
        assert asyncio.run(drive()) is None
    finally:
        gateway.stop()


def test_the_callers_own_cancel_still_propagates():
    started = threading.Event()
    gateway = LocalActor(StuckGateway, (started,), {})

    async def drive() -> None:
        call = asyncio.ensure_future(ledger_snapshot(LocalExecutor(), gateway))
        await asyncio.to_thread(started.wait)
        call.cancel()  # Ctrl-C: the command's own task is cancelled
        with pytest.raises(asyncio.CancelledError):
            await call

    try:
        asyncio.run(drive())
    finally:
        gateway.stop()
