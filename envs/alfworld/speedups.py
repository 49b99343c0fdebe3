"""Make the ALFWorld engine cheaper without changing a character of its output.

textworld's PDDL backend, per game: translates the PDDL problem to SAS twice on every load (the
optimised translation only ever serves replanning) and parses the game's grammar, builds the
initial state twice (load, then reset), copies and dlopens a fresh 33 MB planner library; per
step: re-parses the same text templates (with tatsu) and deep-copies its context dicts per symbol.
We compile each game's plain translation and grammar once per machine (`compile_cache`) and the
optimised translation only if a replan needs it, parse each template once per process (handing
out copies where callers mutate what they get), copy the context dicts shallowly, keep the
initial state from load for the first reset, and reuse closed games' planner libraries. Installed
once per process by `skillopt_envs.alfworld.game`; `scripts/bench_engine.py` measures it and checks that
every observation is identical.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.alfworld.compile_cache import CompileDiskCache, decode, encode

_MAX_ENTRIES = 20000
_MAX_COMPILED = 96  # parts in memory per process: a decoded translation is a few MB, a grammar 5 KB
_MAX_FREE_LIBRARIES = 16


def _memoised(fn: Callable[..., Any], copies: bool) -> Callable[..., Any]:
    """Call `fn` once per distinct arguments. With `copies`, every caller gets its own copy
    (kept pickled, so a hit costs one `pickle.loads`); without, all callers share one result."""
    cache: dict[Any, Any] = {}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("trace"):
            return fn(*args, **kwargs)
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hit = cache[key]
        except KeyError:
            result = fn(*args, **kwargs)
            hit = _pickled(result) if copies else result
            if len(cache) < _MAX_ENTRIES:
                cache[key] = hit
            return result
        except TypeError:  # unhashable arguments: no caching
            return fn(*args, **kwargs)
        if not copies:
            return hit
        return pickle.loads(hit) if isinstance(hit, bytes) else deepcopy(hit[0])

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _pickled(obj: Any) -> Any:
    """bytes to copy from with `pickle.loads` (several times faster than copy.deepcopy on these
    symbol trees), or a 1-tuple holding `obj` for deepcopy when pickle cannot take it."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - anything pickle cannot take is copied the slow way
        return (deepcopy(obj),)


def _copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """textgen's copy_context deep-copies two dicts per symbol, though they are only ever updated
    at the top level (`.update`) and their values (logic variables, names) are never mutated:
    a shallow copy gives the same text (checked game by game in tests/envs/test_alfworld.py)."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


@dataclass
class CompiledParts:
    """A game's SAS translations and parsed grammar: in memory (bounded), then on disk when a
    directory is set, else computed. Translations are only read by textworld (`PddlState` keeps
    the task and reads its actions, types, objects and initial facts), so every game state of a
    problem shares one decoded copy; grammars are merged into (mutable) game logic, so each load
    decodes its own."""

    disk: Optional[CompileDiskCache] = None
    memory: dict[tuple[str, ...], Any] = field(default_factory=dict)  # decoded if shared, else encoded
    computed: dict[str, int] = field(default_factory=dict)  # per kind: found in neither cache

    def get(self, kind: str, parts: tuple[str, ...], compute: Callable[[], Any], shared: bool) -> Any:
        mkey = (kind, *parts)
        if mkey in self.memory:
            hit = self.memory[mkey]
            return hit if shared else decode(hit)
        dkey = self.disk.key(kind, *parts) if self.disk else ""
        stored = self.disk.get(dkey) if self.disk else None
        if stored is not None:
            blob, value = stored
        else:
            self.computed[kind] = self.computed.get(kind, 0) + 1
            value = compute()
            blob = encode(value)
            if self.disk:
                self.disk.put(dkey, blob)
        if len(self.memory) >= _MAX_COMPILED:
            self.memory.pop(next(iter(self.memory)))
        self.memory[mkey] = value if shared else blob
        return value

    def wrap_translator(self, translate: Callable[..., Any]) -> Callable[..., Any]:
        def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
            if verbose:  # TW_PDDL_DEBUG: the caller wants the translator's own output
                return translate(domain, problem, verbose=True, optimize=optimize)
            if optimize:  # only the planner's replanning reads it, and skillopt never replans: translate on first use
                return None, DeferredSas(
                    lambda: self.get(
                        "sas",
                        (domain, problem, "optimize"),
                        lambda: translate(domain, problem, verbose=False, optimize=True),
                        shared=True,
                    )[1]
                )
            return self.get(
                "sas", (domain, problem, "plain"), lambda: translate(domain, problem, verbose=False), shared=True
            )

        pddl2sas.__wrapped__ = translate  # type: ignore[attr-defined]
        return pddl2sas

    def wrap_grammar_parser(self, parse: Callable[..., Any]) -> Callable[..., Any]:
        def parse_and_convert(text: str, rule_name: str = "pddlStart", **kwargs: Any) -> Any:
            if kwargs:
                return parse(text, rule_name=rule_name, **kwargs)
            return self.get("grammar", (text, rule_name), lambda: parse(text, rule_name=rule_name), shared=False)

        parse_and_convert.__wrapped__ = parse  # type: ignore[attr-defined]
        return parse_and_convert


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


class DeferredBytes:
    """SAS text for the planner, produced when the planner first needs it."""

    def __init__(self, produce: Callable[[], bytes]):
        self.produce = produce


class DeferredSas(str):
    """Stands in for the optimised ("replan") translation, which `PddlState` only hands to the
    planner library (`load_sas_replan(sas.encode())`) for `replan()`: policy commands and expert
    plans, which skillopt never asks for. Translating it costs as much as the plain translation.
    Its `encode` defers; the library wrapper (`PlannerLibraries`) loads it on the first replan,
    which plans from the current state either way (checked plan for plan in tests/envs/test_alfworld.py)."""

    def __new__(cls, produce: Callable[[], str]) -> DeferredSas:
        obj = super().__new__(cls, "")
        obj.produce = produce  # type: ignore[attr-defined]
        return obj

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> DeferredBytes:  # type: ignore[override]
        return DeferredBytes(lambda: self.produce().encode(encoding, errors))  # type: ignore[attr-defined]


def _defer_replan_loading(lib: Any) -> Any:
    """Let `load_sas_replan` take a DeferredBytes and load it just before the first `replan`."""
    real_load, real_replan = lib.load_sas_replan, lib.replan
    pending: list[DeferredBytes] = []

    def load_sas_replan(sas: Any) -> None:
        pending.clear()
        if isinstance(sas, DeferredBytes):
            pending.append(sas)
        else:
            real_load(sas)

    def replan(debug: bool) -> Any:
        if pending:
            real_load(pending.pop().produce())
        return real_replan(debug)

    lib.load_sas_replan, lib.replan = load_sas_replan, replan
    return lib


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
        return _defer_replan_loading(self.load())

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


def install(compile_cache_dir: Optional[Path] = None) -> CompiledParts:
    """Idempotent: patch textworld's parsers, fast-downward's translator and library loader, and
    PddlEnv's load/reset. A later call may point the compile cache at another directory."""
    import fast_downward
    import textworld.envs.pddl.logic as pddl_logic
    import textworld.envs.pddl.pddl as pddl_env
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    if getattr(textgen, "_skillopt_memoised", False):
        compiled: CompiledParts = textgen._skillopt_compiled
        if compile_cache_dir is not None and (compiled.disk is None or compiled.disk.directory != compile_cache_dir):
            compiled.disk = CompileDiskCache.open(compile_cache_dir)
        return compiled
    textgen._parse_and_convert = _memoised(textgen._parse_and_convert, copies=True)
    original = Rule.parse_conjunctive_query.__func__  # type: ignore[attr-defined]
    # the query is only read (matched against the state), so one shared instance is safe
    Rule.parse_conjunctive_query = classmethod(_memoised(original, copies=False))  # type: ignore[method-assign]
    textgen.copy_context = _copy_context
    _reuse_initial_state(pddl_env)
    compiled = CompiledParts(CompileDiskCache.open(compile_cache_dir))
    fast_downward.pddl2sas = compiled.wrap_translator(fast_downward.pddl2sas)
    pddl_logic._parse_and_convert = compiled.wrap_grammar_parser(pddl_logic._parse_and_convert)
    textgen._skillopt_compiled = compiled
    libraries = PlannerLibraries(fast_downward.load_lib)
    fast_downward.load_lib = libraries.take
    textgen._skillopt_libraries = libraries
    textgen._skillopt_memoised = True
    return compiled
