"""The schema's key paths, the nearest keys to a mistyped one, and the checked parse of a price override."""

from __future__ import annotations

from typing import Any

from skillopt_ray.config.schema import Config, ConfigError, PriceConfig
from skillopt_ray.config.validation import _at_least


def schema_paths(node: Any = None, prefix: str = "") -> list[str]:
    """Every key path the schema knows (`optimizer.learning_rate`, `llm.prices.<model>.input_per_mtok`, ...)."""
    import dataclasses
    import typing

    node = Config if node is None else node
    out: list[str] = []
    hints = typing.get_type_hints(node)
    for f in dataclasses.fields(node):
        path = f"{prefix}{f.name}"
        out.append(path)
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if dataclasses.is_dataclass(tp):
            out.extend(schema_paths(tp, path + "."))
        elif typing.get_origin(tp) is dict and args and dataclasses.is_dataclass(args[-1]):
            out.extend(schema_paths(args[-1], path + ".<name>."))
    return out


def suggest_keys(key: str, limit: int = 3) -> list[str]:
    """Schema key paths close to a mistyped one (difflib), best first."""
    import difflib

    paths = [p for p in schema_paths() if "<name>" not in p]
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(key, paths, n=limit, cutoff=0.75)
    if not close:  # right leaf under a wrong or missing section: optimizer.learning_rate given as learning_rate
        close = [p for p in paths if p.rsplit(".", 1)[-1] == leaf][:limit]
    if not close:
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        siblings = [p for p in paths if (p.rsplit(".", 1)[0] if "." in p else "") == parent]
        close = difflib.get_close_matches(key, siblings, n=limit, cutoff=0.6)
    return close


PRICE_FIELDS = tuple(f.name for f in __import__("dataclasses").fields(PriceConfig))


def parse_price(model: str, field_name: str, raw: str) -> tuple[str, float]:
    """One `llm.prices.<model>.<field>=<value>` override, checked: the field and a non-negative number."""
    import difflib

    if field_name not in PRICE_FIELDS:
        near = difflib.get_close_matches(field_name, PRICE_FIELDS, n=1, cutoff=0.5)
        hint = (
            f"; did you mean llm.prices.{model}.{near[0]}?" if near else f"; a price has {' and '.join(PRICE_FIELDS)}"
        )
        raise ConfigError(f"unknown key llm.prices.{model}.{field_name}{hint}")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(
            f"llm.prices.{model}.{field_name}={raw!r} is invalid; give US dollars per million tokens, e.g. 0.15"
        ) from None
    _at_least(f"llm.prices.{model}.{field_name}", value, 0)
    return field_name, value
