"""Chat calls to the gateway actor in batches, with each reply back as soon as it is ready.

One Ray actor call costs both processes about half a millisecond of CPU (scripts/bench_scale.py, 27 Nov): at a
thousand episodes in flight that was a third of the gateway's CPU and most of an env actor's. So a process's chat
calls leave together in one `submit` (a lone call goes at the end of its event-loop turn; while other calls are
out, a new one waits COALESCE_S for others to join it), and the replies come back in `collect` calls, each
bringing every reply ready by then. A slow call never
holds a fast one: nothing waits for a batch to finish. Only the transport changes; every call still goes
through `Gateway.chat` on its own (cache, limits, ledger, budgets).

`Mailboxes` lives in the gateway actor; `CallBatcher` in each calling process, one per event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from skillopt_ray.llm.types import LLMError

COLLECT_WAIT_S = 20.0  # a collect with nothing to bring returns empty after this long, so a caller can look again
COALESCE_S = 0.002  # with calls already out, how long a new call waits for others to join its batch
FORGET_AFTER_S = 600.0  # a mailbox nobody collected from this long (its caller died) is dropped with its replies

# (sequence number, ok, the result when ok, else the exception to raise at the caller)
Outcome = tuple[int, bool, Any]


@dataclass
class Mailbox:
    """One caller's calls in the gateway: those running and the outcomes its next collect takes."""

    ready: list[Outcome] = field(default_factory=list)
    running: dict[int, asyncio.Task] = field(default_factory=dict)
    # calls cancelled before their submit arrived (an actor may start two calls of one caller in either order)
    cancelled: set[int] = field(default_factory=set)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    last_seen: float = field(default_factory=time.monotonic)


class Mailboxes:
    """The gateway side: runs submitted calls and keeps their outcomes per caller until collected."""

    def __init__(self, work: Callable[[Any], Awaitable[Any]], wrap: Callable[[Exception, Any], Any]):
        self._work = work  # one call's work: Gateway.chat in the gateway, an episode in an env actor
        self._wrap = wrap  # an exception -> what the caller raises (one line, no remote trace)
        self._boxes: dict[str, Mailbox] = {}
        self._pruned = time.monotonic()

    def _box(self, name: str) -> Mailbox:
        now = time.monotonic()
        if now - self._pruned > 60.0:
            self._pruned = now
            for key in [k for k, b in self._boxes.items() if not b.running and now - b.last_seen > FORGET_AFTER_S]:
                del self._boxes[key]
        box = self._boxes.get(name)
        if box is None:
            box = self._boxes[name] = Mailbox()
        return box

    def submit(self, name: str, calls: list[tuple[int, Any]]) -> int:
        """Start each (sequence number, item); returns how many."""
        box = self._box(name)
        for seq, item in calls:
            if seq in box.cancelled:  # its caller gave up on it before it arrived: never started
                box.cancelled.discard(seq)
                continue
            box.running[seq] = asyncio.ensure_future(self._run(box, seq, item))
        return len(calls)

    async def _run(self, box: Mailbox, seq: int, item: Any) -> None:
        try:
            outcome: Outcome = (seq, True, await self._work(item))
        except asyncio.CancelledError:  # its caller gave up on it (or the actor is closing)
            outcome = (seq, False, self._wrap(RuntimeError("the call was cancelled where it ran"), item))
        except Exception as e:  # noqa: BLE001 - travels to the caller, raised there
            outcome = (seq, False, self._wrap(e, item))
        finally:
            box.running.pop(seq, None)
        box.ready.append(outcome)
        box.event.set()

    async def collect(self, name: str, wait_s: float = COLLECT_WAIT_S) -> list[Outcome]:
        """Every outcome ready for this caller, waiting up to `wait_s` for the first one."""
        box = self._box(name)
        if not box.ready:
            try:
                await asyncio.wait_for(box.event.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
        out, box.ready = box.ready, []
        box.event.clear()
        box.last_seen = time.monotonic()
        return out

    def cancel(self, name: str, seqs: list[int]) -> None:
        """Stop these calls: their callers were cancelled (an episode the gate no longer needs). A call not started
        here yet is not started when it arrives. Once this returns, no call it names makes progress."""
        box = self._box(name)
        for seq in seqs:
            task = box.running.get(seq)
            if task is not None:
                task.cancel()
            elif not any(seq == s for s, _ok, _v in box.ready):  # not run yet (a finished one waits in `ready`)
                box.cancelled.add(seq)

    def running(self) -> int:
        return sum(len(b.running) for b in self._boxes.values())


class CallBatcher:
    """The calling side, bound to one event loop: batches the loop's calls to one actor (its submit, collect and
    cancel_calls methods)."""

    def __init__(self, actor: Any):
        self.actor = actor
        self.box = uuid.uuid4().hex  # this batcher's own mailbox in the actor
        self.loop = asyncio.get_running_loop()
        self._seq = itertools.count(1)
        self.waiting: dict[int, asyncio.Future] = {}
        self._outbox: list[tuple[int, Any]] = []
        self._dropped: list[int] = []
        self._flush_due = False
        self._poller: Optional[asyncio.Task] = None
        self._cancels: set[asyncio.Future] = set()  # cancel_calls sent and not yet acknowledged
        self.batches = 0  # submits sent (tests and benchmarks read it)

    async def call(self, item: Any) -> Any:
        """The outcome of `item` on the actor: its result, or its exception raised here."""
        seq = next(self._seq)
        fut = self.loop.create_future()
        self.waiting[seq] = fut
        self._outbox.append((seq, item))
        self._schedule()
        try:
            return await fut
        except asyncio.CancelledError:
            if self.waiting.pop(seq, None) is not None:
                self._drop(seq)
            raise

    def _drop(self, seq: int) -> None:
        """A call its caller gave up on: taken out of the batch not sent yet, else cancelled on the actor at the end
        of this loop turn (not after COALESCE_S: a loop being closed runs its next turn, not its timers)."""
        kept = [c for c in self._outbox if c[0] != seq]
        if len(kept) < len(self._outbox):
            self._outbox = kept
            return
        self._dropped.append(seq)
        if len(self._dropped) == 1:
            self.loop.call_soon(self._send_cancels)

    def _send_cancels(self) -> None:
        dropped, self._dropped = self._dropped, []
        if dropped:
            ack = asyncio.ensure_future(_acknowledged(self.actor.cancel_calls.remote(self.box, dropped)))
            self._cancels.add(ack)
            ack.add_done_callback(self._cancels.discard)

    async def cancels_acknowledged(self) -> None:
        """Wait until the actor has taken every cancel sent so far (the calls it names then make no progress there)."""
        self._send_cancels()
        await asyncio.gather(*list(self._cancels), return_exceptions=True)

    def _schedule(self) -> None:
        """Flush at the end of this loop turn when no call is out (a lone call waits for nothing); with calls out,
        a little later, so the calls of episodes that start one by one share a batch."""
        if not self._flush_due:
            self._flush_due = True
            if len(self.waiting) > len(self._outbox):
                self.loop.call_later(COALESCE_S, self._flush)
            else:
                self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Send what this loop turn asked for; make sure someone is collecting while calls are out."""
        self._flush_due = False
        calls, self._outbox = self._outbox, []
        if calls:
            self.batches += 1
            asyncio.ensure_future(self._sent(self.actor.submit.remote(self.box, calls), [s for s, _ in calls]))
        if self.waiting and (self._poller is None or self._poller.done()):
            self._poller = asyncio.ensure_future(self._poll())

    async def _sent(self, ref: Any, seqs: list[int]) -> None:
        try:
            await ref
        except Exception as e:  # noqa: BLE001 - the gateway is gone or refused the batch: its callers hear it
            self._fail(seqs, e)

    async def _poll(self) -> None:
        while self.waiting:
            try:
                outcomes = await self.actor.collect.remote(self.box, COLLECT_WAIT_S)
            except Exception as e:  # noqa: BLE001 - the gateway died: every call still out fails with it
                self._fail(list(self.waiting), e)
                return
            for seq, ok, value in outcomes:
                fut = self.waiting.pop(seq, None)
                if fut is None or fut.done():
                    continue
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

    def _fail(self, seqs: list[int], error: BaseException) -> None:
        ray_exceptions = sys.modules.get("ray.exceptions")  # a batcher's actor is a Ray actor: Ray is loaded
        cause = getattr(error, "cause", None)
        if (
            ray_exceptions is not None
            and isinstance(error, ray_exceptions.RayTaskError)
            and isinstance(cause, LLMError)
        ):
            error = cause  # its one-line message, not Ray's wrapper text
        for seq in seqs:
            fut = self.waiting.pop(seq, None)
            if fut is not None and not fut.done():
                fut.set_exception(error)


async def _acknowledged(ref: Any) -> None:
    try:
        await ref
    except Exception:  # noqa: BLE001 - an actor that died has nothing left running
        pass
