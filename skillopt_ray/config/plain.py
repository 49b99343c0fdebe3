"""The configuration as plain data: redacted for logs, shipped to actors and rebuilt into the typed schema there."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Optional, TypedDict, cast

from skillopt_envs.base import EnvSettings

from skillopt_ray.config.schema import MISSING, Config

_SECRET_KEY = re.compile(r"(^|_)(api_key|key|token|secret|password)$")


def redact(obj: Any) -> Any:
    """Config as plain data with anything secret-looking masked.

    Keys *naming* an env var (ending in `_env`) are kept: they are not secrets.
    """
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            ks = str(k).lower()
            if _SECRET_KEY.search(ks) and v not in (None, ""):
                out[k] = "***"
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


class PlainConfig(TypedDict):
    """The resolved config as plain data: what the CLI composes, the run directory keeps and the driver actor gets.

    The top level is Config's fields; each section is the JSON object of its dataclass (benchmark options and
    tags are free-form within it)."""

    experiment: str
    mode: str
    seed: int
    output_dir: str
    run_name: Optional[str]
    resume: bool
    skill_init: Optional[str]
    llm: dict[str, Any]
    env: EnvSettings  # as a benchmark receives it
    optimizer: dict[str, Any]
    ray: dict[str, Any]
    tracking: dict[str, Any]
    eval: dict[str, Any]
    debug: dict[str, Any]


def to_container(cfg: Any) -> PlainConfig:
    if isinstance(cfg, dict):
        return cast(PlainConfig, cfg)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def from_container(data: Mapping[str, object]) -> Config:
    """Plain dict (as shipped to actors) back to the typed Config, strictly (a partial one: the defaults fill in).

    The dict an actor gets was made from a checked Config, so it is rebuilt field by field (milliseconds); anything
    that does not fit the schema exactly goes through OmegaConf's merge (a few hundred milliseconds), which raises
    the schema's error."""
    try:
        return _build(Config, data)  # type: ignore[no-any-return]
    except _NotExact:
        pass
    from omegaconf import OmegaConf

    base = OmegaConf.structured(Config)
    merged = OmegaConf.merge(base, data)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


@functools.cache
def _hints(tp: Any) -> dict[str, object]:
    import typing

    return typing.get_type_hints(tp)


class _NotExact(Exception):
    """A value the direct rebuild does not take as it is: left to OmegaConf."""


def _build(tp: Any, value: Any) -> Any:
    import dataclasses
    import types
    import typing

    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        if not isinstance(value, dict) or set(value) - set(hints):
            raise _NotExact
        if any(value.get(f.name, f.default) is MISSING for f in dataclasses.fields(tp)):
            raise _NotExact  # a required value left out: OmegaConf names it
        try:
            return tp(**{k: _build(hints[k], v) for k, v in value.items()})  # type: ignore[operator]
        except TypeError:
            raise _NotExact from None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise _NotExact
        return _build(rest[0], value)
    if origin is dict and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _build(args[1] if args else Any, v) for k, v in value.items()}
    if origin is list and isinstance(value, list):
        return [_build(args[0] if args else Any, v) for v in value]
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp in (int, str, bool) and type(value) is tp:
        return value
    raise _NotExact
