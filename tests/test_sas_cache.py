"""The PDDL->SAS translation cache: in memory, on disk, safe against corrupt and foreign files."""

from __future__ import annotations

import os
import sys

import pytest

from envs.alfworld import sas_cache
from envs.alfworld.sas_cache import SasDiskCache, decode, encode, resolve_dir
from envs.alfworld.speedups import TranslationCache


def test_encode_round_trip_and_keys(tmp_path):
    cache = SasDiskCache.open(tmp_path / "c")
    assert cache is not None and oct((tmp_path / "c").stat().st_mode & 0o777) == "0o700"
    value = ({"task": [1, 2, 3]}, "begin_version\n3\nend_version\n" * 100)
    assert decode(encode(value)) == value
    k = cache.key("dom", "prob", False)
    assert k != cache.key("dom", "prob", True) and k != cache.key("dom", "prob2", False) and k == cache.key("dom", "prob", False)
    assert cache.get(k) is None and cache.misses == 1
    cache.put(k, encode(value))
    assert cache.get(k)[1] == value and cache.hits == 1
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".tmp-")]  # written atomically


def test_corrupt_entry_is_a_miss_and_is_removed(tmp_path):
    cache = SasDiskCache.open(tmp_path)
    k = cache.key("d", "p", False)
    (tmp_path / f"{k}.pkl.z").write_bytes(b"not a translation")
    assert cache.get(k) is None and cache.misses == 1
    assert not (tmp_path / f"{k}.pkl.z").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.warns(UserWarning, match="not private to this user"):
        assert SasDiskCache.open(shared) is None


def test_resolve_dir_settings(tmp_path, monkeypatch):
    assert resolve_dir("off") is None and resolve_dir(None) is None and resolve_dir("") is None
    monkeypatch.setenv("SKILLOPT_CACHE_DIR", str(tmp_path / "sk"))
    assert resolve_dir("auto") == tmp_path / "sk" / "alfworld_sas_v1"
    monkeypatch.delenv("SKILLOPT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_dir("auto") == tmp_path / "xdg" / "skillopt_ray" / "alfworld_sas_v1"
    assert resolve_dir(str(tmp_path / "mine")) == tmp_path / "mine"


def test_translation_cache_layers(tmp_path):
    calls: list[tuple[str, bool]] = []

    def translate(domain, problem, verbose=False, optimize=False):
        calls.append((problem, optimize))
        return {"problem": problem, "optimize": optimize}, f"sas for {problem}"

    cache = TranslationCache(SasDiskCache.open(tmp_path))
    fn = cache.wrap(translate)
    first = fn("d", "p1")
    first[0]["mutated"] = True  # callers mutate what they get; the cache must not see it
    assert fn("d", "p1") == ({"problem": "p1", "optimize": False}, "sas for p1")
    assert fn("d", "p1", optimize=True)[0]["optimize"] is True
    assert calls == [("p1", False), ("p1", True)] and cache.translations == 2
    cache.memory.clear()  # a fresh process: the disk still has both
    assert fn("d", "p1")[1] == "sas for p1" and fn("d", "p1", optimize=True)[0]["optimize"] is True
    assert len(calls) == 2 and cache.disk.hits == 2
    fn("d", "p1", verbose=True)  # debugging output is the translator's own: never cached
    assert len(calls) == 3


def test_precompile_fills_the_cache_once(alfworld_root, tmp_path):
    from envs.alfworld.data import walk_split
    from envs.alfworld.precompile import main, precompile

    games = [t.payload["gamefile"] for t in walk_split(alfworld_root, "train")[:2]]
    first = precompile(games, tmp_path / "c", workers=1)
    assert first["translated"] == 4 and first["already_cached"] == 0
    assert len(list((tmp_path / "c").glob("*.pkl.z"))) == 4
    again = precompile(games, tmp_path / "c", workers=1)
    assert again["translated"] == 0 and again["already_cached"] == 4
    assert main(["--data", str(alfworld_root), "--cache", "off"]) == 2


def test_default_location_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SKILLOPT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sas_cache.default_dir() == tmp_path / ".cache" / "skillopt_ray" / "alfworld_sas_v1"
