"""The scheduled night is the night you ran (issue 47, item 4): `run` keeps its settings per project (flags, model
overrides, caps, target; key names, never key values) and `schedule --print`'s line, run with cron's environment
(`env -i HOME=... PATH=/usr/bin:/bin SHELL=/bin/sh`), stages that same night against the scripted server. Nothing is
ever installed in the real crontab (--print, or the fake crontab of test_sleep_schedule.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from scripted_server import ScriptedServer
from sleep_fixtures import PlantedRule, task_folder

from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.night import settings

SECRET = "sk-test-value-that-must-never-be-written"


def cron_command(printed: str) -> str:
    """The command of the printed crontab line: the five time fields dropped, cron's `\\%` unescaped."""
    (line,) = [ln for ln in printed.splitlines() if ln and not ln.startswith("#") and " * * * " in ln]
    return line.split(" ", 5)[5].replace("\\%", "%")


def staged(project: Path) -> list[dict]:
    return [json.loads(m.read_text()) for m in sorted((project / ".skillopt" / "staging").glob("*/manifest.json"))]


def test_schedule_refuses_a_project_where_no_night_ran(tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    assert sleep_cli.main(["schedule", "--project", str(project), "--print"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no night has run" in err and "\n" not in err


def test_settings_keep_flags_paths_and_key_names_never_values(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPATIBLE_API_KEY", SECRET)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.chdir(tmp_path)
    a = sleep_cli.parser().parse_args(
        ["run", "--project", "proj", "--max-tokens", "5000", "--target", "codex", "--no-model", "llm=compatible"]
    )
    argv = sleep_cli.run_argv(a)
    assert argv == ["--project", str(tmp_path / "proj"), "--codex-home", str(tmp_path / "codex"), "--no-model",
                    "--max-tokens", "5000", "--target", "codex", "llm=compatible"]  # fmt: skip
    (tmp_path / "proj").mkdir()
    st = settings.save(tmp_path / "proj", argv, tmp_path, {"target": {"api_key_env": "COMPATIBLE_API_KEY"}})
    text = settings.path(tmp_path / "proj").read_text()
    assert st.key_names == ["COMPATIBLE_API_KEY"] and SECRET not in text
    assert settings.load(tmp_path / "proj") == st


def test_a_planted_settings_file_cannot_set_other_variables(tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    settings.save(project, ["--project", str(project)], project, {})
    p = settings.path(project)
    raw = json.loads(p.read_text())
    raw["env"]["LD_PRELOAD"] = "/tmp/evil.so"
    p.write_text(json.dumps(raw))
    assert sleep_cli.main(["schedule", "--project", str(project), "--print"]) == 2
    assert "LD_PRELOAD" in capsys.readouterr().err
    p.chmod(0o666)
    assert sleep_cli.main(["schedule", "--project", str(project), "--print"]) == 2
    assert "not yours alone" in capsys.readouterr().err


@pytest.mark.slow
def test_the_printed_line_under_crons_environment_stages_the_night_of_the_last_run(
    ray_cluster, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("COMPATIBLE_API_KEY", SECRET)
    project = tmp_path / "proj"
    project.mkdir()
    tasks = task_folder(project, n_val=6)
    with ScriptedServer(PlantedRule("HELPFUL")) as srv:
        argv = ["run", "--project", str(project), "--tasks", str(tasks), "--name", "tidy", "--max-tokens", "400000",
                "llm=compatible", f"llm.base_url={srv.base_url}", "tracking=none", "optimizer.gate_seq_budget=1"]  # fmt: skip
        assert sleep_cli.main(argv) == 0, capsys.readouterr().err[-3000:]
        capsys.readouterr()
        assert sleep_cli.main(["schedule", "--project", str(project), "--print"]) == 0
        printed = capsys.readouterr().out
        assert SECRET not in printed and SECRET not in settings.path(project).read_text()
        assert "COMPATIBLE_API_KEY" in printed  # named, for the user to set where cron can read it
        cmd = cron_command(printed)
        assert "--max-tokens 400000" in cmd and "--name tidy" in cmd and f"llm.base_url={srv.base_url}" in cmd
        home = tmp_path / "cron-home"
        home.mkdir()
        before, served = srv.state.attempts, srv.state.prompt_tokens + srv.state.completion_tokens
        done = subprocess.run(
            ["env", "-i", f"HOME={home}", "PATH=/usr/bin:/bin", "SHELL=/bin/sh", "/bin/sh", "-c", cmd],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert srv.state.attempts > before  # the scheduled night called the night's model, not the embedded one
        served = srv.state.prompt_tokens + srv.state.completion_tokens - served
    log = (project / ".skillopt" / "cron.log").read_text()
    assert done.returncode == 0, log[-3000:]
    first, second = staged(project)
    assert second["skill_name"] == first["skill_name"] == "tidy"
    assert second["stamp"] != first["stamp"] and "staged in" in log
    (run_dir,) = [r for r in (project / ".skillopt" / "nights" / "runs").iterdir() if second["stamp"] in r.name]
    import yaml

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["llm"]["budget"]["max_tokens"] == 400000 and config["llm"]["base_url"].startswith("http://127.0.0.1")
    # the scheduled night's cap holds by the server's own count, which is what its ledger booked
    ledger = json.loads((run_dir / "ledger.json").read_text())["totals"]
    assert 0 < served == ledger["tokens"] <= 400000, (served, ledger)
    assert SECRET not in log
