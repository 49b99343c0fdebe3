"""The shells that run `python -m skillopt_ray.sleep` from inside the agents: `install-shells` (idempotent, refusing
a different skill of the same name, --print changing nothing), the plugin's launcher, and with the real CLIs
against the scripted server: Claude Code with the plugin installed from this repository runs
`/skillopt-sleep:status`, Codex with the installed skill runs the status command, and in both the command's
output reaches the model. A session that only ran sleep is then left out of the harvest."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from conftest import need_harness
from scripted_server import ScriptedServer
from sleep_fixtures import claude_session, codex_session, harvest, tasks_of
from sleep_recording import _gateway

from skillopt_ray.llm.agent_api import AgentAPIServer
from skillopt_ray.sleep import agent_shells
from skillopt_ray.sleep.cli import main

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "integrations" / "claude-code" / "skillopt-sleep" / "bin" / "skillopt-sleep"
NO_NIGHTS = "no staged nights in"  # what `status` prints for a project without nights


# --- install-shells --------------------------------------------------------------------------------------------


def test_codex_skill_installs_once_and_again_changes_nothing(tmp_path, capsys):
    home = tmp_path / "codex"
    assert main(["install-shells", "--codex", "--codex-home", str(home)]) == 0
    dest = home / "skills" / "skillopt-sleep" / "SKILL.md"
    assert dest.read_text() == agent_shells.SKILL_SOURCE.read_text()
    assert "installed" in capsys.readouterr().out
    before = dest.stat().st_mtime_ns
    assert main(["install-shells", "--codex", "--codex-home", str(home)]) == 0
    assert "already installed" in capsys.readouterr().out and dest.stat().st_mtime_ns == before
    assert sorted(p.name for p in dest.parent.iterdir()) == ["SKILL.md"]  # no temporary file left behind


def test_codex_home_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "ch"))
    assert main(["install-shells", "--codex"]) == 0
    assert (tmp_path / "ch" / "skills" / "skillopt-sleep" / "SKILL.md").is_file()


def test_a_different_skill_of_the_same_name_is_refused_and_kept(tmp_path, capsys):
    dest = tmp_path / "skills" / "skillopt-sleep" / "SKILL.md"
    dest.parent.mkdir(parents=True)
    dest.write_text("---\nname: skillopt-sleep\ndescription: mine\n---\nMy own.\n")
    assert main(["install-shells", "--codex", "--codex-home", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different skillopt-sleep skill" in err and str(dest) in err
    assert dest.read_text().endswith("My own.\n")


def test_print_changes_nothing_and_names_claude_codes_own_commands(tmp_path, capsys):
    home = tmp_path / "codex"
    assert main(["install-shells", "--codex", "--claude", "--print", "--codex-home", str(home)]) == 0
    out = capsys.readouterr().out
    assert not home.exists()
    assert f"claude plugin marketplace add {REPO}" in out
    assert "claude plugin install skillopt-sleep@skillopt-ray" in out
    assert "SKILLOPT_SLEEP_PYTHON=" in out


def test_nothing_named_and_a_missing_claude_or_marketplace_are_one_line_refusals(tmp_path, capsys):
    assert main(["install-shells"]) == 2
    assert "--codex, --claude" in capsys.readouterr().err
    assert main(["install-shells", "--claude", "--claude-bin", str(tmp_path / "nope")]) == 2
    assert "--claude-bin" in capsys.readouterr().err
    assert main(["install-shells", "--claude", "--print", "--repo", str(tmp_path)]) == 2
    assert "marketplace.json" in capsys.readouterr().err


def test_the_shipped_skill_and_plugin_name_the_same_command():
    skill = agent_shells.SKILL_SOURCE.read_text()
    assert skill.startswith("---\nname: skillopt-sleep\ndescription: ")
    assert "python -m skillopt_ray.sleep status" in skill
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    assert market["name"] == "skillopt-ray"
    (entry,) = market["plugins"]
    plugin = REPO / entry["source"]
    assert json.loads((plugin / ".claude-plugin" / "plugin.json").read_text())["name"] == entry["name"]
    for verb in ("status", "run", "adopt"):
        assert f'bin/skillopt-sleep" {verb}' in (plugin / "commands" / f"{verb}.md").read_text()


def test_the_launcher_uses_the_named_python_or_says_which_variable_to_set(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    ok = subprocess.run(
        [str(LAUNCHER), "status", "--project", str(tmp_path)],
        env={**env, "SKILLOPT_SLEEP_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ok.returncode == 0 and NO_NIGHTS in ok.stdout
    bad = subprocess.run(
        [str(LAUNCHER), "status"], env={**env, "SKILLOPT_SLEEP_PYTHON": str(tmp_path / "nope")}, capture_output=True
    )
    err = bad.stderr.decode().strip()
    assert bad.returncode == 2 and len(err.splitlines()) == 1 and "SKILLOPT_SLEEP_PYTHON" in err


def test_without_the_variable_the_launcher_takes_the_projects_venv_or_names_the_variable(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    bare = subprocess.run([str(LAUNCHER), "status"], env=env, capture_output=True, cwd=tmp_path)
    err = bare.stderr.decode().strip()
    assert bare.returncode == 2 and len(err.splitlines()) == 1 and "set SKILLOPT_SLEEP_PYTHON" in err
    venv_python = tmp_path / ".venv" / "bin" / "python"  # the project's own environment, found from its folder
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    venv_python.chmod(0o755)
    ok = subprocess.run([str(LAUNCHER), "status"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0 and NO_NIGHTS in ok.stdout


# --- the harvest leaves sleep's own sessions out ---------------------------------------------------------------


def _codex_ran(home: Path, cwd: str, prompt: str, commands: list[str]) -> None:
    calls = tuple(
        {
            "timestamp": "2020-01-01T10:00:01.000Z",
            "type": "response_item",
            "payload": {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": c})},
        }
        for c in commands
    )
    codex_session(home, cwd, [], replies=(), extra=({**_user_msg(prompt)}, *calls))


def _user_msg(text: str) -> dict[str, Any]:
    return {
        "timestamp": "2020-01-01T10:00:00.500Z",
        "type": "event_msg",
        "payload": {"type": "user_message", "message": text},
    }


def test_sessions_that_only_ran_sleep_are_counted_not_mined(tmp_path):
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    project.mkdir()
    p = str(project)
    _codex_ran(
        ch,
        p,
        "What does sleep say?",
        ["cat /h/.codex/skills/skillopt-sleep/SKILL.md", "python -m skillopt_ray.sleep status"],
    )
    _codex_ran(ch, p, "Check sleep, then fix the parser", ["python -m skillopt_ray.sleep status", "pytest -q"])
    slash = {
        "role": "user",
        "content": "<command-message>skillopt-sleep:status</command-message>\n<command-name>/skillopt-sleep:status</command-name>",
    }
    base = {"sessionId": "s-own", "cwd": p, "timestamp": "2020-01-01T10:00:00.000Z"}
    claude_session(cc, p, [], sid="s-own", extra=({**base, "type": "user", "message": slash},))
    claude_session(cc, p, ["Write a changelog entry"])
    r = harvest(project, ch, cc)
    assert r["sleep_sessions"] == 2
    assert r["sessions"] == {"codex": 1, "claude_code": 1}
    assert set(tasks_of(project)) == {"Check sleep, then fix the parser", "Write a changelog entry"}


# --- the real CLIs ---------------------------------------------------------------------------------------------


class StatusPolicy:
    """The scripted model. Codex: find the skill in the skills list, read its SKILL.md, run the status command it
    names. Claude Code: `/skillopt-sleep:status` already ran it; for the other commands, run the one command line
    the expanded command file gives. Then answer. Keeps every request it got."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        self.requests.append(body)
        text = "\n".join(str(m.get("content")) for m in body["messages"])
        tool_out = [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]
        if "<command-name>/skillopt-sleep:status" in text or not body.get("tools"):
            return ANSWER
        if "<command-name>/skillopt-sleep:" in text:
            if tool_out:
                return ANSWER
            line = re.search(r"^ {4}(\S+bin/skillopt-sleep\" \w+.*)$", text, re.M)
            assert line, "the command file names no launcher command"
            return _call("Bash", {"command": line.group(1), "description": "run skillopt sleep"}, 0)
        if len(tool_out) >= 2:
            return ANSWER
        if not tool_out:
            roots = dict(re.findall(r"`(r\d+)` = `([^`]+)`", text))
            m = re.search(r"- skillopt-sleep: [^\n]*?\(file: (r\d+)/(\S+?)\)", text)
            assert m, "the installed skill is not in Codex's skills list"
            return _call("exec_command", {"cmd": f"cat {roots[m.group(1)]}/{m.group(2)}"}, 0)
        # the skill's status command, run with the Python the skill says to prefer
        line = re.search(r"^\s+(python -m skillopt_ray\.sleep status)\s*$", tool_out[0], re.M)
        assert line, "SKILL.md does not name the status command"
        return _call("exec_command", {"cmd": line.group(1).replace("python", '"$SKILLOPT_SLEEP_PYTHON"', 1)}, 1)


ANSWER = "Sleep has nothing staged yet."


def _call(name: str, args: dict[str, Any], n: int) -> dict[str, Any]:
    call = {"name": name, "arguments": json.dumps(args)}
    return {"content": "", "tool_calls": [{"id": f"call-{n}", "type": "function", "function": call}]}


async def _with_endpoint(
    tmp: Path, harness: str, policy: StatusPolicy, argv: list[str], env: dict[str, str], cwd: Path
):
    """Run `argv` with the episode endpoint (Responses and Messages APIs over the gateway to the scripted server)
    on a localhost port; returns the CLI's exit status and output."""
    with ScriptedServer(policy=policy) as srv:
        gw = _gateway(srv.base_url, harness, tmp)
        server = AgentAPIServer(gw, "shells/status", stage="rollout")
        await server.start(str(tmp / "agent.sock"))
        site = web.TCPSite(server._runner, "127.0.0.1", 0)  # the CLI runs unjailed here: a port, not the socket
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        env = {k: v.replace("{PORT}", str(port)) for k, v in env.items()}
        try:
            p = await asyncio.create_subprocess_exec(
                *[a.replace("{PORT}", str(port)) for a in argv],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(p.communicate(), 60)
        finally:
            await server.stop()
            await gw.close()
        return p.returncode, out.decode(), err.decode()


def _private(tmp: Path) -> tuple[dict[str, str], Path, Path]:
    """A private HOME, CODEX_HOME and CLAUDE_CONFIG_DIR: the user's own are never touched."""
    home, project = tmp / "home", tmp / "proj"
    for d in (home, project, tmp / "codex", tmp / "claude"):
        d.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(tmp / "codex"),
        "CLAUDE_CONFIG_DIR": str(tmp / "claude"),
        "SKILLOPT_SLEEP_PYTHON": sys.executable,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return env, home, project


def _claude_with_plugin(tmp: Path, monkeypatch: Any, capsys: Any) -> tuple[str, dict[str, str], Path]:
    """Claude Code with the plugin installed by `install-shells --claude` (twice: the second changes nothing)."""
    claude = need_harness("claude")
    env, _, project = _private(tmp)
    for k in ("HOME", "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER"):
        monkeypatch.setenv(k, env[k])
    for _ in range(2):
        assert main(["install-shells", "--claude", "--claude-bin", claude]) == 0, capsys.readouterr().err
    installed = json.loads((tmp / "claude" / "plugins" / "installed_plugins.json").read_text())
    assert list(installed["plugins"]) == [agent_shells.PLUGIN]
    env.update(ANTHROPIC_BASE_URL="http://127.0.0.1:{PORT}", ANTHROPIC_API_KEY="scripted")
    return claude, env, project


@pytest.mark.slow
def test_claude_code_plugin_from_this_repository_runs_status_and_the_model_sees_it(tmp_path, monkeypatch, capsys):
    claude, env, project = _claude_with_plugin(tmp_path, monkeypatch, capsys)
    policy = StatusPolicy()
    argv = [claude, "-p", "--output-format", "text", "/skillopt-sleep:status"]
    rc, out, err = asyncio.run(_with_endpoint(tmp_path, "claude_code", policy, argv, env, project))
    assert rc == 0, err[-800:]
    assert ANSWER in out
    first = "\n".join(str(m.get("content")) for m in policy.requests[0]["messages"])
    assert f"{NO_NIGHTS} {project.resolve()}" in first  # the command ran in the project; its output reached the model
    r = harvest(project, tmp_path / "codex", tmp_path / "claude")
    assert r["sleep_sessions"] == 1 and r["sessions"] == {}


@pytest.mark.slow
def test_claude_code_adopt_command_runs_the_launcher_and_the_refusal_reaches_the_model(tmp_path, monkeypatch, capsys):
    claude, env, project = _claude_with_plugin(tmp_path, monkeypatch, capsys)
    policy = StatusPolicy()
    argv = [claude, "-p", "--output-format", "text", "/skillopt-sleep:adopt"]
    rc, out, err = asyncio.run(_with_endpoint(tmp_path, "claude_code", policy, argv, env, project))
    assert rc == 0, err[-800:]
    tool_out = [str(m.get("content")) for m in policy.requests[-1]["messages"] if m["role"] == "tool"]
    # the command file's own allowed-tools let the Bash call run: adopt's one-line refusal came back
    assert len(tool_out) == 1 and f"no pending night in {project.resolve()}" in tool_out[0], tool_out


@pytest.mark.slow
def test_codex_with_the_installed_skill_runs_status_and_the_model_sees_it(tmp_path):
    codex = need_harness("codex")
    env, _, project = _private(tmp_path)
    assert main(["install-shells", "--codex", "--codex-home", env["CODEX_HOME"]]) == 0
    provider = (
        '{name="scripted",base_url="http://127.0.0.1:{PORT}/v1",env_key="SCRIPTED_KEY",wire_api="responses",'
        "request_max_retries=0,stream_max_retries=0}"
    )
    env["SCRIPTED_KEY"] = "scripted"
    argv = [codex, "exec", "--skip-git-repo-check", "--color", "never", "-C", str(project)]
    # unjailed here, Codex's own sandbox would need user namespaces; the scripted model runs only `cat` and `status`
    argv += ["--sandbox", "danger-full-access", "-m", "scripted", "-c", 'model_provider="scripted"']
    argv += ["-c", f"model_providers.scripted={provider}", "-c", "analytics.enabled=false"]
    argv += ["-c", "feedback.enabled=false", "-c", "check_for_update_on_startup=false"]
    argv += ["What does skillopt sleep say about this project?"]
    policy = StatusPolicy()
    rc, out, err = asyncio.run(_with_endpoint(tmp_path, "codex", policy, argv, env, project))
    assert rc == 0, err[-800:]
    last = [str(m.get("content")) for m in policy.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(last) == 2 and "name: skillopt-sleep" in last[0]
    assert f"{NO_NIGHTS} {project.resolve()}" in last[1]  # the status output reached the model
    r = harvest(project, tmp_path / "codex", tmp_path / "claude")
    assert r["sleep_sessions"] == 1 and r["sessions"] == {}
