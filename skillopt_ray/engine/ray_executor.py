"""The Ray executor: a run's parts as Ray actors (see skillopt_ray/engine/executor.py for the interface; the actor
classes come from skillopt_ray/base/ray_class.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any

import ray

from skillopt_ray.base.ray_class import remote_class
from skillopt_ray.engine.warm import ActorOptions, Spawner, fresh
from skillopt_ray.llm.callbox import CallBatcher


class RayExecutor:
    """Ray actors: started with `spawn` (new ones, or the kept cluster's idle copies), called with `.remote`,
    episodes sent in batches (skillopt_ray/llm/callbox.py), stopped with ray.kill."""

    kind = "ray"

    def __init__(self, spawn: Spawner = fresh):
        self.spawn = spawn
        self._batchers: dict[int, CallBatcher] = {}

    def start(self, cls: type, options: ActorOptions, *args: Any, **kwargs: Any) -> Any:
        return self.spawn(remote_class(cls), options, *args, **kwargs)

    def call(self, handle: Any, method: str, *args: Any) -> Awaitable[Any]:
        return getattr(handle, method).remote(*args)

    def send(self, handle: Any, method: str, item: Any) -> Awaitable[Any]:
        """`item` to the actor's `method` through its mailbox (the actor's submit/collect run `method`'s work)."""
        b = self._batchers.get(id(handle))
        if b is None or b.actor is not handle or b.loop is not asyncio.get_running_loop():
            b = self._batchers[id(handle)] = CallBatcher(handle)
        return b.call(item)

    async def cancels_acknowledged(self) -> None:
        """Until every actor took the cancels this loop's batchers sent (no cancelled call starts after)."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(b.cancels_acknowledged() for b in self._batchers.values() if b.loop is loop))

    async def gather(self, calls: Iterable[Awaitable[Any]]) -> list[Any]:
        return list(await asyncio.gather(*calls))

    def done(self, call: Any) -> tuple[bool, Any]:
        ready, _ = ray.wait([call], timeout=0)
        if not ready:
            return False, None
        try:
            return True, ray.get(ready[0])
        except Exception:  # noqa: BLE001 - the actor died before it answered
            return False, None

    def stop(self, handle: Any) -> None:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - it may already be dead
            pass

    def resources(self) -> dict[str, float]:
        return dict(ray.cluster_resources())

    def node(self) -> str:
        return str(ray.get_runtime_context().get_node_id())
