"""Standby actors: a run's processes started and imported before the run is known.

On the cluster `python -m skillopt_ray.cluster up` keeps, Ray starts a fresh worker process for every actor, and
each spends a second or more importing Ray and this package before it can take a call. The holder of a kept cluster
therefore keeps one idle copy of each actor the last run it served started (the driver, the gateway, the first env
actor), made with the same Ray options. A run that asks for an actor with those options adopts the idle copy: the
copy runs the actor's real constructor with the run's arguments (`adopt`) and from then on is that actor. Each run
still gets processes of its own (a standby serves one run and is replaced), so nothing carries over between runs.

`Spawner.spawn(cls, options, *args, **kwargs)` is how the launch path starts these actors: `fresh` starts a new one
(what every run outside the kept cluster does), a `StandbyPool` hands out an idle copy when one fits.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol, TypedDict

if TYPE_CHECKING:
    from skillopt_ray.config.schema import Config

from skillopt_ray.base.collector import imports_without_collector
from skillopt_ray.base.lifeline import Owner
from skillopt_ray.base.ray_class import ActorOptions, RuntimeEnv

__all__ = ["ActorOptions", "Readiness", "RuntimeEnv", "Spawner", "StandbyPool", "fresh", "with_env"]

ADOPT_TIMEOUT_S = 120.0


class Readiness(TypedDict):
    """The holder's idle actors, and how many of them are up."""

    idle: int
    ready: int


class Spawner(Protocol):
    def __call__(self, cls: Any, options: ActorOptions, *args: Any, **kwargs: Any) -> Any: ...


def fresh(cls: Any, options: ActorOptions, *args: Any, **kwargs: Any) -> Any:
    """A new actor of the Ray actor class `cls` with `options`: what a run does outside the kept cluster."""
    return cls.options(**options).remote(*args, **kwargs)


def with_env(options: ActorOptions, env: dict[str, str]) -> ActorOptions:
    """`options` whose runtime environment also sets `env` (what an adopted actor gets from `adopt`)."""
    if not env:
        return options
    runtime_env = (options.get("runtime_env") or RuntimeEnv()).copy()
    runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **env}
    out = options.copy()
    out["runtime_env"] = runtime_env
    return out


def options_key(cls: Any, options: ActorOptions) -> str:
    """A comparable name for "an actor of this class with these options" (scheduling strategies are objects)."""

    def plain(value: Any) -> Any:
        if isinstance(value, (str, int, float, bool, type(None))):
            return value
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in sorted(value.items())}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return [type(value).__name__, plain(vars(value))] if hasattr(value, "__dict__") else repr(value)

    name = cls.__ray_actor_class__.__name__ if hasattr(cls, "__ray_actor_class__") else repr(cls)
    return json.dumps([name, plain(options)], sort_keys=True)


def standby_class(cls: Any) -> Any:
    """A Ray actor class that starts empty and becomes an actor of `cls` (same methods, same process title) when
    `adopt(env, args, kwargs)` runs `cls`'s constructor. Its own constructor only imports (see `_preload`)."""
    import ray

    base = cls.__ray_actor_class__

    def __init__(self: Any) -> None:
        threading.Thread(target=_preload, args=(base.__name__,), name="standby-preload", daemon=True).start()

    def adopt(self: Any, env: dict[str, str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        from skillopt_ray.base.startup_trace import mark

        os.environ.update(env)  # what this run's command hands its actors (a start-up trace file)
        mark(f"adopting-{base.__name__}")
        base.__init__(self, *args, **kwargs)
        mark(f"adopted-{base.__name__}")
        return os.getpid()

    made = type(base.__name__, (base,), {"__init__": __init__, "adopt": adopt, "__module__": base.__module__})
    made.__qualname__ = base.__qualname__
    return ray.remote(made)


def _preload(kind: str) -> None:
    """What an adopted actor would otherwise import in its constructor or first call: the OpenAI SDK (about 500
    modules) for the gateway, MLflow for the driver's tracker."""
    import importlib

    with imports_without_collector():
        for name in PRELOAD.get(kind, ()):
            with contextlib.suppress(Exception):
                importlib.import_module(name)
        if kind == "GatewayActor":
            with contextlib.suppress(Exception):
                import openai

                client = openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
                _ = client.chat.completions, client.responses  # the SDK loads its resources on first access


PRELOAD: dict[str, tuple[str, ...]] = {
    "GatewayActor": ("aiohttp", "skillopt_ray.llm.client", "skillopt_ray.llm.responses"),
    "DriverActor": ("mlflow", "skillopt_ray.runs.tracking", "skillopt_ray.engine.trainer"),
    "EnvActor": ("skillopt_ray.harness.agent_runner",),
}


@dataclass
class _Idle:
    handle: Any
    ready: Any  # the ref that resolves once its process is up and its class loaded


@dataclass
class StandbyPool:
    """The kept cluster's idle actors, one per (class, options) the last run started; see the module docstring."""

    idle: dict[str, _Idle] = field(default_factory=dict)
    used: list[tuple[str, Any, ActorOptions]] = field(default_factory=list)  # this run's (key, class, options)
    adopted: list[Any] = field(default_factory=list)  # this run's adopt() results, waited on before it starts
    started: list[Any] = field(default_factory=list)  # every actor this run got: ended when the run ends
    env: dict[str, str] = field(default_factory=dict)
    _classes: dict[Any, Any] = field(default_factory=dict)  # each actor class's standby class, made once

    def spawn(self, cls: Any, options: ActorOptions, *args: Any, **kwargs: Any) -> Any:
        key = options_key(cls, options)
        self.used.append((key, cls, options))
        spare = self.idle.pop(key, None)
        if spare is None:  # no idle copy (the holder's first run of this kind): the handed variables go in its start
            handle = fresh(cls, with_env(options, self.env), *args, **kwargs)
        else:
            handle = spare.handle
            self.adopted.append(handle.adopt.remote(dict(self.env), args, kwargs))
        self.started.append(handle)
        return handle

    def wait_adopted(self) -> None:
        """Block until every adopted actor has run its constructor (a call from another process could otherwise
        reach it first: Ray orders the calls of one caller only)."""
        import ray

        refs, self.adopted = self.adopted, []
        if refs:
            ray.get(refs, timeout=ADOPT_TIMEOUT_S)

    def end_run(self) -> None:
        """End the run's actors and start idle copies of the ones it started, for the next run."""
        import ray

        for handle in self.started:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        wanted = {key: (cls, options) for key, cls, options in self.used}
        for key in [k for k in self.idle if k not in wanted]:  # the last run did not use these: not kept
            with contextlib.suppress(Exception):
                ray.kill(self.idle.pop(key).handle, no_restart=True)
        for key, (cls, options) in wanted.items():
            if key not in self.idle:
                handle = self._standby(cls).options(**options).remote()
                self.idle[key] = _Idle(handle, handle.__ray_ready__.remote())
        self.used, self.adopted, self.started, self.env = [], [], [], {}

    def readiness(self) -> Readiness:
        """How many idle actors there are and how many of them are up (a command now would adopt them at once)."""
        import ray

        refs = [spare.ready for spare in list(self.idle.values())]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
        return Readiness(idle=len(refs), ready=len(done))

    def _standby(self, cls: Any) -> Any:
        if cls not in self._classes:
            self._classes[cls] = standby_class(cls)
        return self._classes[cls]

    def close(self) -> None:
        import ray

        for spare in self.idle.values():
            with contextlib.suppress(Exception):
                ray.kill(spare.handle, no_restart=True)
        self.idle.clear()


@dataclass(frozen=True)
class Serving:
    """A run the kept cluster's holder serves for a command: where its actors come from, and who asked (the
    command's process, which the run's actors watch as their owner)."""

    pool: StandbyPool
    owner: Optional[Owner]
    memo: dict[str, Config] = field(default_factory=dict)  # the last composed config (cli.app.composed)


_SERVING: ContextVar[Optional[Serving]] = ContextVar("skillopt_serving", default=None)


def serving() -> Optional[Serving]:
    """The run being served by the kept cluster's holder, or None (a command running its own run)."""
    return _SERVING.get()


@contextlib.contextmanager
def serve(pool: StandbyPool, owner: Optional[Owner], memo: Optional[dict[str, Config]] = None) -> Iterator[Serving]:
    token = _SERVING.set(Serving(pool, owner, memo if memo is not None else {}))
    try:
        yield _SERVING.get()  # type: ignore[misc]
    finally:
        _SERVING.reset(token)


def spawner() -> Spawner:
    s = serving()
    return s.pool.spawn if s is not None else fresh


def wait_ready() -> None:
    s = serving()
    if s is not None:
        s.pool.wait_adopted()


def run_owner() -> Optional[Owner]:
    """The process whose death ends the run's actors: the command's (served or not)."""
    from skillopt_ray.base.lifeline import identity

    s = serving()
    return s.owner if s is not None else identity()
