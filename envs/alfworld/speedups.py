"""Make textworld's text generation cheaper without changing a character of its output.

textworld's PDDL backend re-parses the same grammar templates (with tatsu) every time it writes
an observation or lists admissible commands, deep-copies its context dicts per symbol, and
translates the same PDDL problem to SAS twice on every load, and builds the initial state twice
(load, then reset), and a fresh copy of the planner library for every game. We parse each
template and grammar once, translate each problem once per machine (`sas_cache`), handing out
copies since callers mutate what they get, copy the context dicts shallowly, keep the initial
state from load for the first reset, and reuse closed games' planner libraries. Installed once per process by
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
_MAX_FREE_LIBRARIES = 16


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
            if blob is not None:
                return decode(blob)  # a fresh copy: PddlState keeps and mutates what it gets
            dkey = self.disk.key(domain, problem, bool(optimize)) if self.disk else ""
            stored = self.disk.get(dkey) if self.disk else None
            if stored is not None:
                blob, value = stored
            else:
                self.translations += 1
                value = translate(domain, problem, verbose=False, optimize=optimize)
                blob = encode(value)
                if self.disk:
                    self.disk.put(dkey, blob)
            if len(self.memory) >= _MAX_TRANSLATIONS:
                self.memory.pop(next(iter(self.memory)))
            self.memory[mkey] = blob
            return value  # decoded from disk or just computed: nobody else holds it

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


@dataclass
class PlannerLibraries:
    """textworld gives every game its own copy of fast-downward's planner library (a 33 MB file
    copied to a temp dir and dlopen'ed) and never closes it. Games we close hand theirs back here
    and the next game takes it: a game's first reset loads its problem into the library
    (`load_sas`), as every later reset already does with the same library."""

    load: Callable[[], Any]
    free: list[Any] = field(default_factory=list)
    opened: int = 0

    def take(self) -> Any:
        if self.free:
            return self.free.pop()
        self.opened += 1
        return self.load()

    def give_back(self, lib: Any) -> None:
        if lib is not None and len(self.free) < _MAX_FREE_LIBRARIES:
            self.free.append(lib)


def release_planner(pddl_env: Any) -> None:
    """Called when a game is closed for good: its planner library serves the next game."""
    import textworld.envs.pddl.textgen as textgen

    libraries: Optional[PlannerLibraries] = getattr(textgen, "_skillopt_libraries", None)
    lib = getattr(pddl_env, "downward_lib", None)
    if libraries is not None and lib is not None:
        pddl_env.downward_lib = None
        libraries.give_back(lib)


def install(sas_cache_dir: Optional[Path] = None) -> TranslationCache:
    """Idempotent: patch textgen's template parser, the conjunctive-query parser it uses and
    fast-downward's translator. A later call may point the translation cache at another directory."""
    import fast_downward
    import textworld.envs.pddl.logic as pddl_logic
    import textworld.envs.pddl.pddl as pddl_env
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    if getattr(textgen, "_skillopt_memoised", False):
        cache: TranslationCache = textgen._skillopt_translations
        if sas_cache_dir is not None and (cache.disk is None or cache.disk.directory != sas_cache_dir):
            cache.disk = SasDiskCache.open(sas_cache_dir)
        return cache
    textgen._parse_and_convert = _memoised(textgen._parse_and_convert, _fast_deepcopy)
    pddl_logic._parse_and_convert = _memoised(pddl_logic._parse_and_convert, _fast_deepcopy)  # each game's grammar
    original = Rule.parse_conjunctive_query.__func__  # type: ignore[attr-defined]
    # the query is only read (matched against the state), so one shared instance is safe
    Rule.parse_conjunctive_query = classmethod(_memoised(original, lambda rule: rule))  # type: ignore[method-assign]
    textgen.copy_context = _copy_context
    _reuse_initial_state(pddl_env)
    cache = TranslationCache(SasDiskCache.open(sas_cache_dir))
    fast_downward.pddl2sas = cache.wrap(fast_downward.pddl2sas)
    textgen._skillopt_translations = cache
    libraries = PlannerLibraries(fast_downward.load_lib)
    fast_downward.load_lib = libraries.take
    textgen._skillopt_libraries = libraries
    textgen._skillopt_memoised = True
    return cache
