"""llm=local: the preset composes to the installed coder model, and without the model the run stops before Ray with
one line naming the install command."""

from __future__ import annotations

import pytest


def _local(*extra: str):
    from skillopt_ray import cli

    obj = cli.compose(["+experiment=searchqa", "llm=local", *extra])
    return obj, cli.plain(obj)


def test_local_preset_composes_to_the_installed_coder_model_on_both_roles():
    obj, data = _local()
    assert data["llm"]["embedded"]["model_path"] == "qwen2.5-coder-1.5b"
    assert (obj.llm.embedded.threads, obj.llm.embedded.parallel) == (2, 2)
    for role in (obj.llm.target, obj.llm.optimizer):
        assert (role.provider, role.model) == ("embedded", "qwen2.5-coder-1.5b")


def test_local_preset_without_its_model_is_one_line_naming_the_install_command(tmp_path, monkeypatch):
    from skillopt_ray.cli.checks import check_embedded_model, check_keys
    from skillopt_ray.cli.errors import UsageError

    monkeypatch.setenv("SKILLOPT_MODELS_DIR", str(tmp_path))
    _, data = _local()
    for check in (check_embedded_model, check_keys):
        with pytest.raises(UsageError) as e:
            check(data)
        assert "scripts/install_model.sh qwen2.5-coder-1.5b" in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").write_bytes(b"GGUF")
    check_embedded_model(data)  # found once installed
    _, replay = _local("llm.cache_mode=replay")
    monkeypatch.setenv("SKILLOPT_MODELS_DIR", str(tmp_path / "empty"))
    check_embedded_model(replay)  # a replayed run calls no model: nothing to install


def test_a_run_on_the_tiny_model_ends_by_saying_what_its_zeros_mean(tmp_path, capsys):
    from skillopt_ray.cli.report import _tiny_model_note
    from skillopt_ray.runs.rundir import RunDir

    _, tiny = cli_typed(["+experiment=searchqa"])
    RunDir(tmp_path).write_config(tiny)
    _tiny_model_note(tmp_path)
    out = capsys.readouterr().out
    assert "0.000 means the tiny model solved no test task" in out and "A real model learns" in out
    _, local = _local()
    RunDir(tmp_path).write_config(local)
    _tiny_model_note(tmp_path)
    assert capsys.readouterr().out == ""  # a real model's scores need no such note


def cli_typed(overrides: list[str]):
    from skillopt_ray import cli

    obj = cli.compose(overrides)
    return obj, cli.plain(obj)
