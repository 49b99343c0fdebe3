"""The harvest's gate floor (the fewest validation tasks the night's gate can ever accept on) is read from the
config the night composes (the sleep preset, then the command's overrides), never from the override text: a changed
preset, a quoted value or an interpolation is seen, and the harvest's splits and its too-few note follow it."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest
from scripted_server import ScriptedServer
from sleep_fixtures import codex_session

from skillopt_ray.sleep.cli import main

compose_mod = importlib.import_module("skillopt_ray.cli.compose")  # the package's `compose` names the function

PROMPTS = [f"Please add a {what} to the deploy script" for what in (
    "dry run flag", "verbose flag", "rollback step", "health check", "changelog entry", "timeout option",
    "retry loop", "lock file", "progress bar", "summary line", "exit code table", "help text",
)]  # fmt: skip


@pytest.fixture()
def strict_preset(tmp_path, monkeypatch) -> Path:
    """A copy of the configs whose sleep preset asks the gate for p <= 0.01 (7 tasks), no override saying so."""
    conf = tmp_path / "conf"
    shutil.copytree(compose_mod.CONF_DIR, conf)
    preset = conf / "experiment" / "sleep.yaml"
    text = preset.read_text()
    assert "gate_seq_task_p: 0.05" in text
    preset.write_text(text.replace("gate_seq_task_p: 0.05", "gate_seq_task_p: 0.01"))
    monkeypatch.setattr(compose_mod, "CONF_DIR", conf)
    monkeypatch.setenv("SKILLOPT_COMPOSE_CACHE", "off")
    return conf


def floor(overrides: list[str]) -> int:
    from skillopt_ray.sleep.cli import gate_floor
    from skillopt_ray.sleep.harvest.llm_setup import night_config

    return gate_floor(night_config(overrides))


def test_the_floor_is_the_composed_gates_whatever_spells_it():
    assert floor([]) == 5 and floor(["llm=compatible"]) == 5  # the preset's
    assert floor(["optimizer.gate_seq_task_p=0.1"]) == 4
    assert floor(["optimizer.gate_seq_task_p='0.01'"]) == 7  # quoted: still the number 0.01
    interpolated = ["optimizer.gate_alpha=0.01", "optimizer.gate_seq_task_p=${optimizer.gate_alpha}"]
    assert floor(interpolated) == 7
    assert floor(["optimizer.gate_test=sign"]) == 0  # not the sequential gate: no floor said


def test_a_preset_that_changes_the_gate_changes_the_floor(strict_preset):
    assert floor([]) == 7
    assert floor(["llm=compatible"]) == 7


def _harvest(tmp_path: Path, *extra: str) -> dict:
    project = tmp_path / "proj"
    project.mkdir()
    for prompt in PROMPTS:
        codex_session(tmp_path / "codex", str(project), [prompt])
    argv = ["harvest", "--project", str(project), "--codex-home", str(tmp_path / "codex"), "--claude-home",
            str(tmp_path / "claude"), "--lookback", "all", "--no-model", "--json", "--val-fraction", "0.05",
            "--test-fraction", "0.3", *extra]  # fmt: skip
    return argv


def test_the_harvests_validation_split_grows_to_the_presets_floor(tmp_path, capsys, strict_preset):
    assert main(_harvest(tmp_path)) == 0
    report = json.loads(capsys.readouterr().out)
    assert sum(report["splits"].values()) == len(PROMPTS), report["splits"]
    assert report["splits"]["val"] == 7, report["splits"]  # the strict preset's floor, not the built-in 5


def test_the_harvests_validation_split_grows_to_the_default_floor(tmp_path, capsys):
    assert main(_harvest(tmp_path, "llm=compatible")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["splits"]["val"] == 5, report["splits"]


def test_the_too_few_note_names_the_presets_floor(tmp_path, capsys, monkeypatch, strict_preset):
    """Two sessions make at most 6 tasks: enough for the shipped preset's 5, short of the strict preset's 7."""
    monkeypatch.setenv("COMPATIBLE_API_KEY", "test-key-not-secret")
    project = tmp_path / "proj"
    project.mkdir()
    codex_session(tmp_path / "codex", str(project), [PROMPTS[0]])
    codex_session(tmp_path / "codex", str(project), [PROMPTS[1]])
    reply = json.dumps([{"prompt": PROMPTS[0], "kind": "chat"}])
    with ScriptedServer(policy=lambda body, headers: reply) as srv:
        argv = ["harvest", "--project", str(project), "--codex-home", str(tmp_path / "codex"), "--claude-home",
                str(tmp_path / "claude"), "--lookback", "all", "--json", "--send-digests", "llm=compatible",
                f"llm.base_url={srv.base_url}"]  # fmt: skip
        assert main(argv) == 0
    assert "never pass the gate (at least 7 validation tasks" in capsys.readouterr().err
