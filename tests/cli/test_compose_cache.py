"""The compose cache: a repeated command skips Hydra's composition and gets the same checked config; anything a
composition depends on (overrides, prices, config files, the environment variables they read) makes another key; a
damaged, planted or out-of-date entry is a miss, never a config; errors are never remembered."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest
from conftest import qa_fixture

from skillopt_ray import cli
from skillopt_ray.cli import app, compose_cache, launch
from skillopt_ray.cli.compose import CONF_DIR

LLM = ["llm=compatible", "llm.base_url=http://127.0.0.1:9/v1", "tracking=none", "debug.progress=off"]


@pytest.fixture()
def runs(tmp_path, monkeypatch):
    """Run the command up to where the engine would start; count Hydra compositions; the cache in tmp_path."""
    monkeypatch.setenv(compose_cache.CACHE_ENV, str(tmp_path / "cache"))
    seen = {"composed": 0, "configs": []}
    real = app.compose_node

    def counting(*a: Any, **kw: Any) -> Any:
        seen["composed"] += 1
        return real(*a, **kw)

    def drive(checked: Any, *_a: Any, **_kw: Any) -> dict:
        seen["configs"].append(checked.data)
        return {"status": "error", "exit": cli.EXIT_STOPPED, "message": "stopped before the engine", "notes": []}

    monkeypatch.setattr(app, "compose_node", counting)
    monkeypatch.setattr(launch, "_drive", drive)
    qa_fixture(tmp_path / "qa")
    base = ["+experiment=searchqa", f"env.data_dir={tmp_path / 'qa'}", "env.options.split_source=folders", *LLM]
    base.append(f"output_dir={tmp_path / 'out'}")

    def run(*extra: str) -> int:
        return cli.main([*base, *extra])

    return run, seen, tmp_path / "cache"


def test_a_repeated_command_is_not_composed_again_and_gets_the_same_config(runs):
    run, seen, cache = runs
    assert run() == cli.EXIT_STOPPED and seen["composed"] == 1
    assert len(list(cache.glob("*.json"))) == 1
    assert run() == cli.EXIT_STOPPED and seen["composed"] == 1  # read back, not composed
    assert seen["configs"][0] == seen["configs"][1]
    assert run("seed=7") == cli.EXIT_STOPPED and seen["composed"] == 2  # another override: another key
    assert seen["configs"][2]["seed"] == 7
    assert run("llm.prices.scripted.input_per_mtok=1.5") == cli.EXIT_STOPPED and seen["composed"] == 3  # prices too


def test_a_damaged_planted_or_out_of_date_entry_is_a_miss(runs, tmp_path):
    run, seen, cache = runs
    run()
    entry = next(cache.glob("*.json"))
    good = json.loads(entry.read_text())
    for bad in ("{not json", json.dumps({**good, "mode": "sideways"}), json.dumps({**good, "no_such_key": 1})):
        entry.write_text(bad)
        before = seen["composed"]
        assert run() == cli.EXIT_STOPPED and seen["composed"] == before + 1, bad[:40]
        assert seen["configs"][-1] == seen["configs"][0]
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({**good, "seed": 99}))
    entry.unlink()
    entry.symlink_to(secret)  # a symlink is never followed
    before = seen["composed"]
    assert run() == cli.EXIT_STOPPED and seen["composed"] == before + 1
    assert seen["configs"][-1]["seed"] == good["seed"]


def test_an_error_is_never_remembered_and_the_cache_can_be_turned_off(runs, monkeypatch, capsys):
    run, seen, cache = runs
    assert run("optimizer.learning_ratee=3") == cli.EXIT_CONFIG
    assert run("optimizer.learning_ratee=3") == cli.EXIT_CONFIG and seen["composed"] == 2
    assert not list(cache.glob("*.json"))
    assert "learning_ratee" in capsys.readouterr().err
    monkeypatch.setenv(compose_cache.CACHE_ENV, "off")
    run()
    run()
    assert seen["composed"] == 4 and not cache.exists()


def test_the_key_follows_config_files_and_the_environment_they_read(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    words = ["", "+experiment=searchqa", "llm=compatible"]
    monkeypatch.delenv("COMPATIBLE_MODEL", raising=False)
    key = compose_cache.fingerprint([conf], words)
    assert compose_cache.fingerprint([conf], words) == key
    monkeypatch.setenv("COMPATIBLE_MODEL", "m2")  # read by conf/llm/compatible.yaml through oc.env
    assert compose_cache.fingerprint([conf], words) != key
    monkeypatch.delenv("COMPATIBLE_MODEL")
    monkeypatch.setenv("SOME_UNRELATED_VARIABLE", "x")
    assert compose_cache.fingerprint([conf], words) == key
    yaml = conf / "config.yaml"
    yaml.write_text(yaml.read_text() + "\n# edited\n")
    os.utime(yaml, ns=(1, 1))
    assert compose_cache.fingerprint([conf], words) != key
    assert compose_cache.fingerprint([conf], [*words, "seed=2"]) != compose_cache.fingerprint([conf], words)


def test_an_unwritable_cache_folder_costs_nothing_but_the_shortcut(runs, tmp_path, monkeypatch):
    run, seen, _cache = runs
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would be")
    monkeypatch.setenv(compose_cache.CACHE_ENV, str(blocked / "compose"))
    assert run() == cli.EXIT_STOPPED and run() == cli.EXIT_STOPPED
    assert seen["composed"] == 2


def test_the_cached_config_is_the_composed_one_field_by_field(runs):
    run, seen, cache = runs
    run("optimizer.learning_rate=5")
    run("optimizer.learning_rate=5")
    first, second = seen["configs"][-2:]
    assert first == second and first["optimizer"]["learning_rate"] == 5
