"""Make textworld's text generation cheaper without changing a character of its output.

textworld's PDDL backend re-parses the same grammar templates (with tatsu) every time it writes
an observation or lists admissible commands, deep-copies its context dicts per symbol, and
translates the same PDDL problem to SAS twice on every load, and builds the initial state twice
(load, then reset). We parse each template once, translate each problem once per machine
(`sas_cache`), handing out copies since callers mutate what they get, copy the context dicts
shallowly, and keep the initial state from load for the first reset. Installed once per process by
`envs.alfworld.game`; `scripts/bench_engine.py` measures it and checks that every observation is
identical.
"""

from __future__ import annotations

import pickle
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from envs.alfworld.sas_cache import SasDiskCache, decode, encode

_MAX_ENTRIES = 20000
_MAX_TRANSLATIONS = 512  # encoded, about 60 KB each


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


@dataclass
class TranslationCache:
    """PDDL->SAS translations as pickles: in memory (bounded), then on disk when a directory is set."""

    disk: Optional[SasDiskCache] = None
    memory: dict[tuple[str, str, bool], bytes] = field(default_factory=dict)
    translations: int = 0  # computed here, i.e. found in neither cache

    def wrap(self, translate: Callable[..., Any]) -> Callable[..., Any]:
        def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
            if verbose:  # TW_PDDL_DEBUG: the caller wants the translator's own output
                return translate(domain, problem, verbose=True, optimize=optimize)
            mkey = (domain, problem, bool(optimize))
            blob = self.memory.get(mkey)
            if blob is None:
                dkey = self.disk.key(domain, problem, bool(optimize)) if self.disk else ""
                blob = self.disk.get(dkey) if self.disk else None
                if blob is None:
                    self.translations += 1
                    blob = encode(translate(domain, problem, verbose=False, optimize=optimize))
                    if self.disk:
                        self.disk.put(dkey, blob)
                if len(self.memory) >= _MAX_TRANSLATIONS:
                    self.memory.pop(next(iter(self.memory)))
                self.memory[mkey] = blob
            return decode(blob)  # a fresh copy: PddlState keeps and mutates what it gets

        pddl2sas.__wrapped__ = translate  # type: ignore[attr-defined]
        return pddl2sas


def _reuse_initial_state(pddl_env: Any) -> None:
    """`PddlEnv.load` builds the initial PddlState (two translations decoded, the planner loaded) and
    the `reset` that always follows throws it away and builds the same one again. Keep the one from
    load for the first reset after it; later resets build afresh as before (the game was played)."""
    original_load, original_reset = pddl_env.PddlEnv.load, pddl_env.PddlEnv.reset

    def load(self: Any, filename_or_data: Any) -> None:
        original_load(self, filename_or_data)
        self._skillopt_initial_state = self._pddl_state

    def reset(self: Any) -> Any:
        initial = self.__dict__.pop("_skillopt_initial_state", None)
        if initial is None:
            return original_reset(self)
        # reset builds its state through this module attribute; textworld runs on one thread per
        # process, and the substitution lasts for this one call only
        build = pddl_env.pddl_logic.PddlState
        pddl_env.pddl_logic.PddlState = lambda *_args, **_kwargs: initial
        try:
            return original_reset(self)
        finally:
            pddl_env.pddl_logic.PddlState = build

    pddl_env.PddlEnv.load, pddl_env.PddlEnv.reset = load, reset


def install(sas_cache_dir: Optional[Path] = None) -> TranslationCache:
    """Idempotent: patch textgen's template parser, the conjunctive-query parser it uses and
    fast-downward's translator. A later call may point the translation cache at another directory."""
    import fast_downward
    import textworld.envs.pddl.pddl as pddl_env
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    if getattr(textgen, "_skillopt_memoised", False):
        cache: TranslationCache = textgen._skillopt_translations
        if sas_cache_dir is not None and (cache.disk is None or cache.disk.directory != sas_cache_dir):
            cache.disk = SasDiskCache.open(sas_cache_dir)
        return cache
    textgen._parse_and_convert = _memoised(textgen._parse_and_convert, _fast_deepcopy)
    original = Rule.parse_conjunctive_query.__func__  # type: ignore[attr-defined]
    # the query is only read (matched against the state), so one shared instance is safe
    Rule.parse_conjunctive_query = classmethod(_memoised(original, lambda rule: rule))  # type: ignore[method-assign]
    textgen.copy_context = _copy_context
    _reuse_initial_state(pddl_env)
    cache = TranslationCache(SasDiskCache.open(sas_cache_dir))
    fast_downward.pddl2sas = cache.wrap(fast_downward.pddl2sas)
    textgen._skillopt_translations = cache
    textgen._skillopt_memoised = True
    return cache
