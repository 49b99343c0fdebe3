"""The Ray executor: a run's parts as Ray actors (see skillopt_ray/engine/executor.py for the interface).

Each plain class names its Ray actor (`ray_name`, the process title `ray::<name>`) and its default options
(`ray_options`); `remote_class` makes that actor class once per process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any

import ray

from skillopt_ray.engine.warm import ActorOptions, Spawner, fresh
from skillopt_ray.llm.callbox import CallBatcher

_CLASSES: dict[type, Any] = {}


def remote_class(cls: type) -> Any:
    """The Ray actor class of the plain class `cls`, named `cls.ray_name`, with `cls.ray_options` as defaults."""
    made = _CLASSES.get(cls)
    if made is None:
        name = getattr(cls, "ray_name", cls.__name__)
        named = type(name, (cls,), {"__module__": cls.__module__, "__qualname__": name})
        options = dict(getattr(cls, "ray_options", {}))
        made = _CLASSES[cls] = ray.remote(**options)(named) if options else ray.remote(named)
    return made


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
