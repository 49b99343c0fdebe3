"""The one-process engine's first-call event (after which the driver's MLflow tracker opens) is set when a model call
starts on its part, not when it is asked: a call asked while the gateway is still being made (its imports) must not
let MLflow's import take the GIL from it."""

from __future__ import annotations

import asyncio
import threading

from skillopt_ray.engine.executor import LocalActor


class SlowToMake:
    """A part whose constructor waits for `release` (as the gateway's waits for the OpenAI SDK's import)."""

    def __init__(self, release: threading.Event):
        release.wait()

    async def chat(self, text: str) -> str:
        return text

    def ledger_snapshot(self) -> dict:
        return {}


def test_the_first_call_event_is_set_when_a_model_call_starts_on_a_made_part():
    release, first_call = threading.Event(), threading.Event()
    actor = LocalActor(SlowToMake, (release,), {}, first_call)

    async def drive() -> None:
        snapshot = actor.ask("ledger_snapshot")  # not a model call: never sets it
        reply = actor.ask("chat", "hello")  # asked while the part is still being made
        await asyncio.sleep(0.05)
        assert not first_call.is_set()
        release.set()
        assert await snapshot == {}
        assert await reply == "hello"
        assert first_call.is_set()

    try:
        asyncio.run(drive())
    finally:
        release.set()
        actor.stop()


def test_a_part_that_only_answers_other_calls_never_sets_it():
    release, first_call = threading.Event(), threading.Event()
    release.set()
    actor = LocalActor(SlowToMake, (release,), {}, first_call)

    async def drive() -> None:
        assert await actor.ask("ledger_snapshot") == {}

    try:
        asyncio.run(drive())
    finally:
        actor.stop()
    assert not first_call.is_set()
