"""Make textworld's text generation cheaper without changing a character of its output.

textworld's PDDL backend re-parses the same grammar templates (with tatsu) every time it writes
an observation or lists admissible commands, deep-copies its context dicts per symbol, and
translates the same PDDL problem to SAS twice on every reset. We parse and translate each input
once (handing out copies, since callers mutate what they get) and copy the context dicts shallowly.
Installed once per process by `envs.alfworld.game`; `scripts/bench_engine.py` measures it and
checks that every observation is identical.
"""

from __future__ import annotations

import pickle
from copy import deepcopy
from typing import Any, Callable

_MAX_ENTRIES = 20000


def _memoised(fn: Callable[..., Any], copy: Callable[[Any], Any]) -> Callable[..., Any]:
    cache: dict[Any, Any] = {}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("trace"):
            return fn(*args, **kwargs)
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hit = cache[key]
        except KeyError:
            hit = fn(*args, **kwargs)
            if len(cache) < _MAX_ENTRIES:
                cache[key] = hit
        except TypeError:  # unhashable arguments: no caching
            return fn(*args, **kwargs)
        return copy(hit)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _fast_deepcopy(obj: Any) -> Any:
    """A pickle round trip copies these symbol trees several times faster than copy.deepcopy."""
    try:
        return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # noqa: BLE001 - anything pickle cannot take is copied the slow way
        return deepcopy(obj)


def _copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """textgen's copy_context deep-copies two dicts per symbol, though they are only ever updated
    at the top level (`.update`) and their values (logic variables, names) are never mutated:
    a shallow copy gives the same text (checked game by game in tests/test_alfworld.py)."""
    return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}


def install() -> None:
    """Idempotent: patch textgen's template parser and the conjunctive-query parser it uses."""
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    if getattr(textgen, "_skillopt_memoised", False):
        return
    textgen._parse_and_convert = _memoised(textgen._parse_and_convert, _fast_deepcopy)
    original = Rule.parse_conjunctive_query.__func__  # type: ignore[attr-defined]
    # the query is only read (matched against the state), so one shared instance is safe
    Rule.parse_conjunctive_query = classmethod(_memoised(original, lambda rule: rule))  # type: ignore[method-assign]
    textgen.copy_context = _copy_context
    import fast_downward

    # every reset translates the same PDDL problem to SAS twice; translate once per (domain, problem)
    fast_downward.pddl2sas = _memoised(fast_downward.pddl2sas, _fast_deepcopy)
    textgen._skillopt_memoised = True
