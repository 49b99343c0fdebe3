"""Where a run's parts run: Ray actors, or objects in this one process.

The driver, the env workers and the gateway are plain classes. An executor starts them (`start`), calls their
methods (`call`, and `send` for episodes, which Ray batches), and stops them (`stop`); that is all that differs
between a run on Ray and a run in one process. This module never imports Ray: the Ray executor lives in
`skillopt_ray/engine/ray_executor.py` and is imported only by a run that uses it.

In one process each part is a `LocalActor`: the object on a thread of its own with its own event loop, so its
concurrency is what it is on Ray (its own loop; a benchmark whose steps block holds only its own thread), and a
call from another thread hops to that loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import inspect
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Iterable
from typing import Any, Optional, Protocol

from skillopt_ray.engine.warm import ActorOptions

STOP_WAIT_S = 5.0  # how long stop() waits for a local actor's thread to finish its loop
FIRST_CALL_WAIT_S = 10.0  # how long the driver's tracker waits at most for `first_call` before it opens anyway
MODEL_CALLS = frozenset({"chat", "chat_json", "agent_chat"})  # the gateway's methods that call the model


class Executor(Protocol):
    """Start, call, gather, stop: the whole difference between the two places a run can run."""

    kind: str  # "local" | "ray"

    def start(self, cls: type, options: ActorOptions, *args: Any, **kwargs: Any) -> Any: ...

    def call(self, handle: Any, method: str, *args: Any) -> Awaitable[Any]: ...

    def send(self, handle: Any, method: str, item: Any) -> Awaitable[Any]: ...

    async def gather(self, calls: Iterable[Awaitable[Any]]) -> list[Any]: ...

    async def cancels_acknowledged(self) -> None: ...

    def done(self, call: Any) -> tuple[bool, Any]: ...

    def stop(self, handle: Any) -> None: ...

    def resources(self) -> dict[str, float]: ...

    def node(self) -> str: ...


class ActorStartError(RuntimeError):
    """A local actor's constructor raised: every call to it raises this (a Ray actor that failed to start is dead)."""


class LocalActor:
    """An object living on its own thread and event loop; `ask(method, *args)` runs a method there from anywhere."""

    def __init__(
        self, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any], asked: Optional[threading.Event] = None
    ):
        self.name = getattr(cls, "ray_name", cls.__name__)
        self._asked = asked  # set when a model call starts on it (its constructor, and so its imports, done)
        self.loop = asyncio.new_event_loop()
        self.obj: Any = None
        self.stopped = False  # stop() was called: calls still in it are cancelled by it, not by their callers
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._serve, args=(cls, args, kwargs), name=self.name, daemon=True)
        self._thread.start()

    def _serve(self, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        asyncio.set_event_loop(self.loop)
        # what a Ray actor's loop reports goes to its worker's log file, never to the command: here, to debug logging
        self.loop.set_exception_handler(_quiet)
        try:
            self.obj = cls(*args, **kwargs)  # on its own thread, as a Ray actor's constructor runs in its process
        except Exception as e:  # noqa: BLE001 - raised to every caller
            self._error = e
        try:
            self.loop.run_forever()
        finally:
            # what still ran when it was stopped (a run cancelled by Ctrl-C, calls its caller gave up on) is cancelled
            # and let go quietly, as a Ray actor's calls end with its process
            left = asyncio.all_tasks(self.loop)
            for task in left:
                task.cancel()
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(asyncio.wait_for(asyncio.gather(*left, return_exceptions=True), 0.5))
            self.loop.close()

    async def _invoke(self, method: str, args: tuple[Any, ...]) -> Any:
        if self._error is not None:
            raise ActorStartError(f"the {self.name} did not start: {type(self._error).__name__}: {self._error}")
        if self._asked is not None and method in MODEL_CALLS:
            # here, not when asked: a call asked while the gateway is still being made (a resumed run's first call,
            # asked at once) would let MLflow's import take the GIL from the gateway's own imports
            self._asked.set()
        out = getattr(self.obj, method)(*args)
        return await out if inspect.isawaitable(out) else out

    def ask(self, method: str, *args: Any) -> Awaitable[Any]:
        """The method's result, awaited on the caller's loop (a cancel there cancels it here too)."""
        if self.loop.is_closed():
            raise ActorStartError(f"the {self.name} has stopped")
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._invoke(method, args), self.loop))

    def stop(self) -> None:
        """Cancel what runs on it and end its loop; a thread stuck in blocking code is left to end with the process."""
        self.stopped = True
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # closed meanwhile
            return
        if threading.current_thread() is not self._thread:
            self._thread.join(STOP_WAIT_S)


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    logging.getLogger(__name__).debug("local actor: %s", context.get("message"), exc_info=context.get("exception"))


class LocalExecutor:
    """Every part of the run in this process: each a LocalActor (placement options mean nothing here)."""

    kind = "local"

    def __init__(self) -> None:
        # set when a model call is asked of a part this executor started (or by the driver's tracker, when a use of it
        # cannot wait for one: engine/driver.py TrackerWhenReady)
        self.first_call = threading.Event()

    def start(self, cls: type, options: ActorOptions, *args: Any, **kwargs: Any) -> LocalActor:
        """The part on its own thread, given its own copy of its arguments (as Ray's serialization gives an actor
        one: the gateway fills in its roles' endpoints in the config it gets), handles to other parts shared."""
        keep: dict[int, Any] = {id(a): a for a in (*args, *kwargs.values()) if isinstance(a, LocalActor)}
        args, kwargs = copy.deepcopy((args, kwargs), keep)
        return LocalActor(cls, args, kwargs, self.first_call)

    def call(self, handle: LocalActor, method: str, *args: Any) -> Awaitable[Any]:
        return handle.ask(method, *args)

    def send(self, handle: LocalActor, method: str, item: Any) -> Awaitable[Any]:
        return handle.ask(method, item)  # no process boundary to batch over

    async def gather(self, calls: Iterable[Awaitable[Any]]) -> list[Any]:
        return list(await asyncio.gather(*calls))

    async def cancels_acknowledged(self) -> None:
        """A cancelled local call was cancelled on its worker's loop; one turn of it lets that land."""
        await asyncio.sleep(0)

    def done(self, call: Any) -> tuple[bool, Any]:
        if isinstance(call, (asyncio.Future, concurrent.futures.Future)):
            if call.done() and not call.cancelled() and call.exception() is None:
                return True, call.result()
            return False, None
        return True, call

    def stop(self, handle: LocalActor) -> None:
        handle.stop()

    def resources(self) -> dict[str, float]:
        return {"CPU": float(os.cpu_count() or 1)}

    def node(self) -> str:
        return "local"


def ray_failure(e: BaseException) -> Optional[str]:
    """How a Ray call failed: "callee" (raised inside the call: an actor it called in turn died), "actor" (the
    actor called died), or None (not Ray's doing). Imports no Ray: without Ray loaded, no error can be Ray's."""
    exc = sys.modules.get("ray.exceptions")
    if exc is None:
        return None
    if isinstance(e, exc.RayTaskError) and isinstance(e, exc.RayActorError):
        return "callee"
    if isinstance(e, exc.RayTaskError):
        return None
    if isinstance(e, exc.RayActorError):
        return "actor"
    return None


def ray_executor() -> Executor:
    """The Ray executor (imports Ray)."""
    from skillopt_ray.engine.ray_executor import RayExecutor

    return RayExecutor()
