"""The compile cache of ALFWorld game parts: in memory, on disk, safe against corrupt and foreign files."""

from __future__ import annotations

import os
import sys

import pytest
from skillopt_envs.alfworld import compile_cache, speedups
from skillopt_envs.alfworld.compile_cache import CompileDiskCache, decode, encode, resolve_dir
from skillopt_envs.alfworld.speedups import CompiledParts


def test_encode_round_trip_and_keys(tmp_path):
    cache = CompileDiskCache.open(tmp_path / "c")
    assert cache is not None and oct((tmp_path / "c").stat().st_mode & 0o777) == "0o700"
    value = ({"task": [1, 2, 3]}, "begin_version\n3\nend_version\n" * 100)
    assert decode(encode(value)) == value
    k = cache.key("sas", "dom", "prob", "plain")
    assert k != cache.key("sas", "dom", "prob", "optimize") and k != cache.key("sas", "dom", "prob2", "plain")
    assert k != cache.key("grammar", "dom", "prob", "plain") and k == cache.key("sas", "dom", "prob", "plain")
    assert cache.get(k) is None and cache.misses == 1
    cache.put(k, encode(value))
    assert cache.get(k)[1] == value and cache.hits == 1
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".tmp-")]  # written atomically


def test_corrupt_entry_is_a_miss_and_is_removed(tmp_path):
    cache = CompileDiskCache.open(tmp_path)
    k = cache.key("sas", "d", "p", "plain")
    (tmp_path / f"{k}.pkl.z").write_bytes(b"not a translation")
    assert cache.get(k) is None and cache.misses == 1
    assert not (tmp_path / f"{k}.pkl.z").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.warns(UserWarning, match="not private to this user"):
        assert CompileDiskCache.open(shared) is None


def test_resolve_dir_settings(tmp_path, monkeypatch):
    assert resolve_dir("off") is None and resolve_dir(None) is None and resolve_dir("") is None
    monkeypatch.setenv("SKILLOPT_CACHE_DIR", str(tmp_path / "sk"))
    assert resolve_dir("auto") == tmp_path / "sk" / "alfworld_compiled_v1"
    monkeypatch.delenv("SKILLOPT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_dir("auto") == tmp_path / "xdg" / "skillopt_ray" / "alfworld_compiled_v1"
    assert resolve_dir(str(tmp_path / "mine")) == tmp_path / "mine"


def test_compiled_parts_layers(tmp_path):
    calls: list[tuple[str, bool]] = []

    def translate(domain, problem, verbose=False, optimize=False):
        calls.append((problem, optimize))
        return {"problem": problem, "optimize": optimize}, f"sas for {problem}" + (" (optimised)" if optimize else "")

    def parse(text, rule_name="pddlStart", **kwargs):
        calls.append((text, rule_name))
        return {"actions": [text]}, rule_name

    compiled = CompiledParts(CompileDiskCache.open(tmp_path))
    fn, grammar = compiled.wrap_translator(translate), compiled.wrap_grammar_parser(parse)
    first = fn("d", "p1")
    assert fn("d", "p1") is first  # textworld only reads translations: one shared copy
    task, deferred = fn("d", "p1", optimize=True)  # the replanning translation waits for a replan
    sas = deferred.encode("utf-8")
    assert task is None and isinstance(sas, speedups.DeferredBytes) and len(calls) == 1
    assert sas.produce() == b"sas for p1 (optimised)" and calls[-1] == ("p1", True)
    parsed = grammar("g1", rule_name="pddlStart")
    parsed[0]["actions"].append("mutated")  # grammars are merged into mutable game logic: own copies
    assert grammar("g1", rule_name="pddlStart") == ({"actions": ["g1"]}, "pddlStart")
    assert len(calls) == 3 and compiled.computed == {"sas": 2, "grammar": 1}
    compiled.memory.clear()  # a fresh process: the disk still has all three
    assert fn("d", "p1")[1] == "sas for p1" and fn("d", "p1", optimize=True)[1].produce() == "sas for p1 (optimised)"
    assert grammar("g1", rule_name="pddlStart")[0] == {"actions": ["g1"]}
    assert len(calls) == 3 and compiled.disk.hits == 3
    fn("d", "p1", verbose=True)  # debugging output is the translator's own: never cached
    grammar("g1", rule_name="pddlStart", trace=True)
    assert len(calls) == 5


def test_precompile_fills_the_cache_once(alfworld_root, tmp_path):
    from skillopt_envs.alfworld.data import walk_split
    from skillopt_envs.alfworld.precompile import main, precompile

    games = [t.payload["gamefile"] for t in walk_split(alfworld_root, "train")[:2]]
    first = precompile(games, tmp_path / "c", workers=1)
    assert first["compiled"] == 4 and first["already_cached"] == 0  # per game: a translation, a grammar
    assert (
        len(list((tmp_path / "c").glob("sas-*.pkl.z"))) == 2
        and len(list((tmp_path / "c").glob("grammar-*.pkl.z"))) == 2
    )
    again = precompile(games, tmp_path / "c", workers=1)
    assert again["compiled"] == 0 and again["already_cached"] == 4
    assert main(["--data", str(alfworld_root), "--cache", "off"]) == 2


def test_default_location_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SKILLOPT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert compile_cache.default_dir() == tmp_path / ".cache" / "skillopt_ray" / "alfworld_compiled_v1"
