"""Batched chat calls to the gateway actor (skillopt_ray/llm/callbox.py): fewer actor calls, same outcomes.

In-process tests drive a CallBatcher against Mailboxes through a stand-in for a Ray actor handle (each
`.remote` a task on the same loop); one test goes through a real GatewayActor on the session's Ray cluster.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import llm_config
from skillopt_envs.chat import ChatRequest, ChatResult

from skillopt_ray.llm.callbox import CallBatcher, Mailboxes
from skillopt_ray.llm.types import LLMError, LLMInternalError, LLMUnavailable


class Method:
    """What a Ray actor method looks like to the batcher: `.remote(...)` returns an awaitable; calls are counted."""

    def __init__(self, fn: Any):
        self.fn, self.calls = fn, 0

    def remote(self, *args: Any) -> Any:
        self.calls += 1
        out = self.fn(*args)
        return asyncio.ensure_future(out) if asyncio.iscoroutine(out) else _done(out)


def _done(value: Any) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(value)
    return fut


class FakeActor:
    def __init__(self, chat: Any):
        self.boxes = Mailboxes(chat, lambda e, req: e if isinstance(e, LLMError) else LLMInternalError(str(e)))
        self.submit = Method(self.boxes.submit)
        self.collect = Method(self.boxes.collect)
        self.cancel_calls = Method(self.boxes.cancel)


def req(key: str) -> ChatRequest:
    return ChatRequest("target", "rollout", [{"role": "user", "content": key}], key)


async def echo_after(r: ChatRequest) -> ChatResult:
    """Replies with the key after the delay the key names (`slow...` 0.5 s, else 0.01 s); `down...` fails."""
    await asyncio.sleep(0.5 if r.key.startswith("slow") else 0.01)
    if r.key.startswith("down"):
        raise LLMUnavailable(f"endpoint down for {r.key}")
    return ChatResult(f"reply to {r.key}")


def test_many_calls_in_one_turn_go_in_one_submit_and_each_gets_its_own_reply():
    async def go() -> tuple[list[str], FakeActor, CallBatcher]:
        actor = FakeActor(echo_after)
        b = CallBatcher(actor)
        replies = await asyncio.gather(*(b.call(req(f"k{i}")) for i in range(200)))
        return [r.content for r in replies], actor, b

    contents, actor, b = asyncio.run(go())
    assert contents == [f"reply to k{i}" for i in range(200)]
    assert actor.submit.calls == 1 and b.batches == 1
    assert actor.collect.calls < 20  # a handful of collects bring 200 replies, not one actor call each
    assert not b.waiting and actor.boxes.running() == 0


def test_calls_started_one_by_one_while_others_are_out_share_a_batch():
    """Episodes start one per loop turn (each its own actor call arriving); with calls out, theirs coalesce."""

    async def go() -> tuple[int, list[str]]:
        actor = FakeActor(echo_after)
        b = CallBatcher(actor)
        first = asyncio.ensure_future(b.call(req("slow-0")))
        await asyncio.sleep(0)  # the first call leaves alone, at the end of its turn
        later = []
        for i in range(10):
            later.append(asyncio.ensure_future(b.call(req(f"k{i}"))))
            await asyncio.sleep(0)  # one loop turn each
        replies = await asyncio.gather(first, *later)
        return b.batches, [r.content for r in replies]

    batches, contents = asyncio.run(go())
    assert contents == ["reply to slow-0"] + [f"reply to k{i}" for i in range(10)]
    assert batches < 6  # not one per call


def test_a_slow_call_does_not_hold_the_fast_ones_of_its_batch():
    async def go() -> tuple[bool, str]:
        release = asyncio.Event()  # the slow call is answered only when the test says so: no race with a clock

        async def chat(r: ChatRequest) -> ChatResult:
            if r.key.startswith("slow"):
                await release.wait()
            return ChatResult(f"reply to {r.key}")

        b = CallBatcher(FakeActor(chat))
        slow = asyncio.ensure_future(b.call(req("slow-1")))
        fast = await asyncio.gather(*(b.call(req(f"k{i}")) for i in range(20)))
        assert all(r.content.startswith("reply to k") for r in fast)
        slow_was_out = not slow.done()
        release.set()
        return slow_was_out, (await slow).content

    slow_was_out, slow_reply = asyncio.run(go())
    assert slow_was_out and slow_reply == "reply to slow-1"  # the fast replies came back while the slow one was out


def test_an_error_reaches_its_own_caller_only_as_itself():
    async def go() -> list[Any]:
        b = CallBatcher(FakeActor(echo_after))
        return await asyncio.gather(b.call(req("ok-1")), b.call(req("down-1")), return_exceptions=True)

    ok, err = asyncio.run(go())
    assert ok.content == "reply to ok-1"
    assert isinstance(err, LLMUnavailable) and err.message == "endpoint down for down-1"


def test_a_cancelled_caller_cancels_its_call_in_the_gateway():
    started, finished = [], []

    async def slow_chat(r: ChatRequest) -> ChatResult:
        started.append(r.key)
        await asyncio.sleep(5)
        finished.append(r.key)
        return ChatResult("late")

    async def go() -> tuple[FakeActor, CallBatcher]:
        actor = FakeActor(slow_chat)
        b = CallBatcher(actor)
        task = asyncio.ensure_future(b.call(req("gone")))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        return actor, b

    actor, b = asyncio.run(go())
    assert started == ["gone"] and finished == []
    assert actor.cancel_calls.calls == 1 and actor.boxes.running() == 0 and not b.waiting


def test_a_cancel_that_arrives_before_its_call_keeps_the_call_from_starting():
    """An actor may take two calls of one caller in either order: a call cancelled before its submit arrived is
    never started, and the caller can wait for its cancels to be taken (an acknowledged cancel)."""
    started: list[str] = []

    async def chat(r: ChatRequest) -> ChatResult:
        started.append(r.key)
        await asyncio.sleep(5 if r.key == "dropped" else 0)
        return ChatResult("ran")

    async def go() -> Mailboxes:
        boxes = Mailboxes(chat, lambda e, _r: e)
        boxes.cancel("caller", [2])  # the cancel first...
        boxes.submit("caller", [(1, req("kept")), (2, req("gone"))])  # ...then the batch it names
        await asyncio.sleep(0.01)
        return boxes

    boxes = asyncio.run(go())
    assert started == ["kept"] and boxes.running() == 0

    async def acknowledged() -> tuple[FakeActor, list[str]]:
        actor = FakeActor(chat)
        b = CallBatcher(actor)
        task = asyncio.ensure_future(b.call(req("dropped")))
        while "dropped" not in started:  # running on the actor
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await b.cancels_acknowledged()  # the cancel is sent at once and taken
        return actor, list(b._cancels)

    actor, unacknowledged = asyncio.run(acknowledged())
    assert actor.cancel_calls.calls == 1 and actor.boxes.running() == 0 and unacknowledged == []


def test_a_dead_gateway_fails_every_call_still_out():
    class Died(Exception):
        pass

    async def go() -> list[Any]:
        actor = FakeActor(echo_after)

        async def dead(*_: Any) -> Any:
            raise Died("actor died")

        actor.collect = Method(dead)
        b = CallBatcher(actor)
        return await asyncio.gather(*(b.call(req(f"k{i}")) for i in range(3)), return_exceptions=True)

    assert all(isinstance(e, Died) for e in asyncio.run(go()))


def test_through_a_real_gateway_actor(ray_cluster, tmp_path):
    """Episodes' chat calls on a GatewayActor: batched, each reply its own, the ledger counting every call."""
    import sys
    from pathlib import Path

    import ray

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from scripted_server import ScriptedServer

    from skillopt_ray.llm.gateway import GatewayActor, LLMHandle

    srv = ScriptedServer(policy=lambda body, headers: f"ok {headers.get('x-skillopt-key', '')}")
    url = srv.start()
    role = {"provider": "openai", "model": "scripted", "base_url": url, "structured_output": "none"}
    llm_cfg = {"backend": "compatible", "target": role, "optimizer": role, "cache_mode": "off"}
    actor = GatewayActor.remote(llm_config(llm_cfg), None, str(tmp_path / "ledger.json"))
    try:
        handle = LLMHandle(actor)

        async def go() -> list[ChatResult]:
            return await asyncio.gather(*(handle.chat(req(f"ep{i}")) for i in range(60)))

        results = asyncio.run(go())
        assert [r.content for r in results] == [f"ok ep{i}" for i in range(60)]
        assert handle._batcher is not None and handle._batcher.batches == 1
        assert ray.get(actor.ledger_snapshot.remote())["totals"]["calls"] == 60
        bad = ChatRequest("target", "rollout", None, key="x")  # type: ignore[arg-type] - breaks inside the gateway
        with pytest.raises(LLMInternalError) as e:
            asyncio.run(handle.chat(bad))
        assert "\n" not in e.value.message and "ray::" not in e.value.message
    finally:
        ray.get(actor.close.remote())
        ray.kill(actor)
        srv.stop()


def test_a_call_cancelled_before_its_batch_left_is_never_sent():
    async def go() -> tuple[FakeActor, list[str]]:
        actor = FakeActor(echo_after)
        b = CallBatcher(actor)
        out = asyncio.ensure_future(b.call(req("first")))
        await asyncio.sleep(0.005)  # sent: later calls now wait COALESCE_S for company
        keep = asyncio.ensure_future(b.call(req("kept")))
        gone = asyncio.ensure_future(b.call(req("gone")))
        await asyncio.sleep(0)  # both queued for the next batch
        gone.cancel()
        results = await asyncio.gather(out, keep)
        return actor, [r.content for r in results]

    actor, contents = asyncio.run(go())
    assert contents == ["reply to first", "reply to kept"] and actor.cancel_calls.calls == 0
    assert actor.submit.calls == 2 and actor.boxes.running() == 0
