"""An agent task of your own with the real Codex CLI, jailed, against the scripted server: the agent writes a file in
its workspace, and the task's check (run in the sandbox afterwards) reads that file."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import skillopt_envs
from conftest import need_bwrap, need_harness
from harness_helpers import SKILL_FILE, _eval, _gateway
from scripted_server import ScriptedServer

pytestmark = pytest.mark.slow

CHECK = """import json, pathlib, sys
task = json.load(open(sys.argv[1]))
written = pathlib.Path(sys.argv[2], "answer.txt")
print("answer.txt:", written.read_text().strip() if written.exists() else "(missing)")
print(1.0 if written.exists() and written.read_text().strip() == task["answer"] else 0.0)
"""


class FileWritingAgent:
    """Codex's model: read SKILL.md, then write answer.txt (the word from the workspace's notes.txt when the skill
    holds RULE-chore, a wrong word otherwise), then say it is done."""

    def __init__(self) -> None:
        self.tasks: list[str] = []

    def __call__(self, body, headers):
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        tool_text = "\n".join(str(m.get("content")) for m in tools)
        m = re.search(r"/([^/]+)/a\d+$", headers.get("x-skillopt-key", ""))
        self.tasks.append(m.group(1) if m else "")
        if not tools:
            cmd = f"cat {SKILL_FILE}"
        elif len(tools) == 1:
            cmd = "cp notes.txt answer.txt" if "RULE-chore" in tool_text else "echo wrong > answer.txt"
        else:
            return "answer.txt is written."
        call = {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
        return {"content": "", "tool_calls": [{"id": f"c{len(tools)}", "type": "function", "function": call}]}


def test_codex_agent_task_is_scored_by_a_check_reading_the_file_it_wrote(tmp_path):
    need_bwrap()
    need_harness("codex")
    root = tmp_path / "chores"
    for name, split in (("copy-note", "train"), ("v", "val"), ("t", "test")):
        d = root / name
        (d / "workspace").mkdir(parents=True)
        (d / "task.md").write_text("Put the word from notes.txt into answer.txt.")
        (d / "task.json").write_text(
            json.dumps({"split": split, "answer": "banana", "metadata": {"task_type": "chore"}})
        )
        (d / "workspace" / "notes.txt").write_text("banana\n")
        (d / "check.py").write_text(CHECK)
    bench = skillopt_envs.make("custom", {"data_dir": str(root), "options": {}})
    task = bench.load_split("train")[0]
    agent = FileWritingAgent()
    with ScriptedServer(policy=agent) as srv:
        (good,) = asyncio.run(_eval(_gateway(srv.base_url, "codex", tmp_path / "a"), bench, [task], "RULE-chore: copy"))
        (bad,) = asyncio.run(_eval(_gateway(srv.base_url, "codex", tmp_path / "b"), bench, [task], ""))
    assert good.hard == 1.0 and good.scored, (good.error, good.fail_reason, good.trajectory[-1])
    assert "answer.txt: banana" in good.trajectory[-1]["content"]
    assert good.info["target_system_prompt"].startswith('---\nname: "skillopt-target"') and good.info["agent_summary"]
    assert bad.hard == 0.0 and bad.scored and "answer.txt: wrong" in bad.trajectory[-1]["content"]
    assert set(agent.tasks) == {"copy-note"}
