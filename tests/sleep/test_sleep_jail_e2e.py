"""From a harvest to the jail: the model miner (the scripted optimizer) turns two sessions into a chat task and an
agent task (its workspace from the session's commit), the folder loads as custom tasks unchanged, and both run in
the jail with the real Codex CLI and Claude Code and are scored by the harvested check, whose patterns the target
never sees."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
import skillopt_envs
from conftest import need_bwrap, need_harness
from harness_helpers import _eval, _gateway
from scripted_server import ScriptedServer
from sleep_fixtures import claude_session, codex_session

from skillopt_ray.sleep.cli import main

pytestmark = pytest.mark.slow

CHAT = "Which blue pigment name do we use in the style guide?"
AGENT = "Write NOTES.md describing what app.py prints"
FILLER = "Explain the release checklist"
SECRET_WORD = "cerulean"  # what the chat check looks for: in the check's task.json, never in a target's request
NOTES_CMD = "grep -q hello NOTES.md"


class Policy:
    """Optimizer: the mined tasks. Target: read task.md, then the chat answer, or (agent task) write NOTES.md with
    its shell and say it is done."""

    def __init__(self) -> None:
        self.target_texts: list[str] = []

    def __call__(self, body, headers):
        if headers.get("x-skillopt-role") != "target":
            text = json.dumps(body["messages"])
            if "blue pigment" in text:
                return json.dumps(
                    [{"prompt": CHAT, "kind": "chat", "checks": [{"op": "contains", "arg": SECRET_WORD}]}]
                )
            if "NOTES" in text:
                return json.dumps(
                    [{"prompt": AGENT, "kind": "agent", "checks": [{"op": "command_succeeds", "arg": NOTES_CMD}]}]
                )
            return json.dumps([{"prompt": FILLER, "kind": "chat", "checks": [{"op": "max_chars", "arg": 5000}]}])
        self.target_texts += [json.dumps(m) for m in body["messages"] if m["role"] != "assistant"]
        seen = json.dumps([m for m in body["messages"] if m["role"] == "tool"])
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done == 0:
            return self._shell(body, "cat task.md", "c0")
        if "NOTES.md describing" in seen and done == 1:
            return self._shell(body, "echo 'app.py prints hello' > NOTES.md", "c1")
        if "blue pigment" in seen:
            return f"We use {SECRET_WORD}."
        return "Done."

    @staticmethod
    def _shell(body, cmd, cid):
        names = {t["function"]["name"] for t in body.get("tools") or []}
        if "exec_command" in names:
            call = {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
        else:
            call = {"name": "Bash", "arguments": json.dumps({"command": cmd, "description": "work"})}
        return {"content": "", "tool_calls": [{"id": cid, "type": "function", "function": call}]}


def _project(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "app.py").write_text("print('hello')\n")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "app"], cwd=project, check=True
    )
    return project, subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.parametrize("harness,cli", [("codex", "codex"), ("claude_code", "claude")])
def test_harvested_chat_and_agent_tasks_run_in_the_jail(tmp_path, monkeypatch, capsys, harness, cli):
    need_bwrap()
    need_harness(cli)
    monkeypatch.setenv("COMPATIBLE_API_KEY", "test-key-not-secret")
    project, sha = _project(tmp_path)
    ch, cc = tmp_path / "codex", tmp_path / "claude"
    codex_session(ch, str(project), ["what was that blue pigment name again?"])
    codex_session(ch, str(project), ["write some NOTES about app.py", "no, in NOTES.md"], commit=sha)
    claude_session(cc, str(project), ["walk me through the release checklist"])
    policy = Policy()
    with ScriptedServer(policy=policy) as srv:
        argv = ["harvest", "--project", str(project), "--codex-home", str(ch), "--claude-home", str(cc),
                "--lookback", "all", "llm=compatible", f"llm.base_url={srv.base_url}"]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        folder = project / ".skillopt" / "tasks"
        bench = skillopt_envs.make("custom", {"data_dir": str(folder), "options": {}})
        tasks = {t.payload["task"]["prompt"].strip(): t for t in bench.load_split("all")}
        assert set(tasks) == {CHAT, AGENT, FILLER}
        agent_ws = folder / tasks[AGENT].task_id / "workspace"
        assert (agent_ws / "app.py").read_text() == "print('hello')\n"
        chat, agent = asyncio.run(
            _eval(_gateway(srv.base_url, harness, tmp_path / "gw"), bench, [tasks[CHAT], tasks[AGENT]], "Be brief.")
        )
    for r in (chat, agent):
        assert r.scored and r.hard == 1.0, (r.error, r.fail_reason, r.trajectory[-1])
    assert "PASS: check 1 (the reply must contain a phrase the task requires)" in chat.trajectory[-1]["content"]
    assert "PASS: check 1 (the command" in agent.trajectory[-1]["content"]
    assert policy.target_texts and not any(SECRET_WORD in t or NOTES_CMD in t for t in policy.target_texts)
