"""The Ray actor class of a plain class: made on first use, so that a module defining a run's part imports no Ray.

Each plain class names its Ray actor (`ray_name`, which Ray shows as the process title `ray::<name>`) and its
default options (`ray_options`); `remote_class` makes that actor class once per process (and imports Ray then).
"""

from __future__ import annotations

from typing import Any, TypedDict


class RuntimeEnv(TypedDict, total=False):
    env_vars: dict[str, str]


class ActorOptions(TypedDict, total=False):
    """The Ray options (`cls.options(**...)`, a class's default `ray_options`) a run's actors are started with."""

    num_cpus: float
    max_concurrency: int
    resources: dict[str, float]
    scheduling_strategy: object  # "SPREAD" or a Ray strategy object (NodeAffinitySchedulingStrategy)
    label_selector: dict[str, str]
    fallback_strategy: list[dict[str, dict[str, str]]]
    runtime_env: RuntimeEnv


_CLASSES: dict[type, Any] = {}


def remote_class(cls: type) -> Any:
    """The Ray actor class of the plain class `cls`, named `cls.ray_name`, with `cls.ray_options` as defaults."""
    made = _CLASSES.get(cls)
    if made is None:
        import ray

        name = getattr(cls, "ray_name", cls.__name__)
        named = type(name, (cls,), {"__module__": cls.__module__, "__qualname__": name})
        options = dict(getattr(cls, "ray_options", {}))
        made = _CLASSES[cls] = ray.remote(**options)(named) if options else ray.remote(named)
    return made
