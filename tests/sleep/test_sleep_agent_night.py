"""A night with the real Codex CLI and Claude Code (issue 43): agent tasks (one to train on, two to gate on)
replayed in the jail against the scripted server, a planted helpful rule accepted by a lowered sequential gate, staged with its memory block,
adopted, and then seen by the real CLI run once more on the project: the skill is listed to the model, the agent
reads it (its session log says so) and its text and the memory block reach the model's requests."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import need_bwrap, need_harness
from scripted_server import Policies, ScriptedServer
from sleep_recording import _gateway

from skillopt_ray.harness import commands, runner
from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.harvest.task_folder import write_tasks
from skillopt_ray.sleep.harvest.tasks import MinedTask
from skillopt_ray.sleep.proposal import memory

pytestmark = pytest.mark.slow

RULE = "- HELPFUL: finish with the word DONE-OK."
MEMORY = "# Team notes\n\nBe kind to the build.\n"
SKILLS = {"codex": ".agents/skills", "claude_code": ".claude/skills"}


def shell(body: dict[str, Any], cmd: str, cid: str) -> dict[str, Any]:
    """One call of the CLI's own shell tool, whichever CLI asks."""
    names = {t["function"]["name"] for t in body.get("tools") or []}
    if "exec_command" in names:
        call = {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
    else:
        call = {"name": "Bash", "arguments": json.dumps({"command": cmd, "description": "read"})}
    return {"content": "", "tool_calls": [{"id": cid, "type": "function", "function": call}]}


class AgentPlantedRule(Policies):
    """Target: read the episode's skill with the shell, then pass (DONE-OK) only when the skill holds the planted
    rule. Analysts: plant that rule."""

    def target_reply(self, body: dict[str, Any], key: str) -> Any:
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        if not tools:
            return shell(body, "cat .agents/skills/skillopt-target/SKILL.md", "c0")
        return "All done: DONE-OK" if "HELPFUL" in json.dumps(tools) else "I gave up."

    def _opt_analyst(self, system: str, prompt: str) -> dict[str, Any]:
        out = super()._opt_analyst(system, prompt)
        out["patch"]["edits"] = [{"op": "append", "content": RULE}]
        return out


def agent_project(tmp: Path, harness: str) -> Path:
    project = tmp / "proj"
    project.mkdir()
    (project / memory.FILES[harness]).write_text(MEMORY)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    tasks = [
        MinedTask(f"Tidy the notes file, part {i}, and say when done.", "agent", [{"op": "contains", "arg": "DONE-OK"}])
        for i in range(3)
    ]
    # two validation tasks: one discordant pair is never enough (the gate's margin grows with their square root)
    splits = {t.id: "train" if i == 0 else "val" for i, t in enumerate(tasks)}
    write_tasks(project / ".skillopt" / "tasks", tasks, splits, project, {"project": str(project)})
    return project


def night(project: Path, harness: str, srv: ScriptedServer) -> int:
    # two validation tasks: the task-level sign-flip test could never pass (this test is about the agents, not the gate)
    gate = ["optimizer.gate_seq_deterministic=true", "optimizer.gate_seq_accept_at=1", "optimizer.gate_seq_final_at=1"]
    gate += ["optimizer.gate_seq_task_p=0.5"]  # 2 tasks both better: p = 0.25
    return sleep_cli.main(
        ["run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks"), "--target", harness,
         "--name", "tidy", "--memory", "llm=compatible", f"llm.base_url={srv.base_url}", "tracking=none",
         "llm.target.agent.timeout_s=60", *gate]
    )  # fmt: skip


class UsesTheSkill:
    """The model after adoption: when the request lists the skill `tidy`, read its SKILL.md with the shell."""

    def __init__(self, harness: str):
        self.path = f"{SKILLS[harness]}/tidy/SKILL.md"
        self.requests: list[str] = []

    def __call__(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        self.requests.append(json.dumps(body))
        if "tidy:" in self.requests[-1] and not any(m["role"] == "tool" for m in body["messages"]):
            return shell(body, f"cat {self.path}", "r0")
        return "Done."


@pytest.mark.parametrize("harness,cli", [("codex", "codex"), ("claude_code", "claude")])
def test_a_night_on_agent_tasks_is_adopted_and_the_real_cli_loads_the_skill(
    ray_cluster, tmp_path, monkeypatch, capsys, harness, cli
):
    need_bwrap()
    need_harness(cli)
    monkeypatch.setenv("COMPATIBLE_API_KEY", "test-key-not-secret")
    project = agent_project(tmp_path, harness)
    with ScriptedServer(AgentPlantedRule()) as srv:
        code = night(project, harness, srv)
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    (rep,) = (project / ".skillopt" / "nights" / "runs").glob("night-*/night/report.json")
    report = json.loads(rep.read_text())
    assert report["verdict"] == "accepted", report
    # the estimate printed before the first call, from the CLI's measured per-episode calls, beside the ledger
    est = json.loads((rep.parent / "estimate.json").read_text())
    spent, plan = est["spent"]["tokens"], est["planned"]["tokens"]
    assert plan / 2 <= spent <= 2 * plan and spent <= est["at_most"]["tokens"], est
    live_skill = project / SKILLS[harness] / "tidy" / "SKILL.md"
    assert report["live_path"] == str(live_skill) and not live_skill.exists()
    mem = project / memory.FILES[harness]
    assert mem.read_text() == MEMORY  # proposed, not written, by the night
    assert sleep_cli.main(["status", "--project", str(project)]) == 0
    assert f"memory {mem}: block 'tidy'" in capsys.readouterr().out

    assert sleep_cli.main(["adopt", "--project", str(project)]) == 0
    skill = live_skill.read_text()
    assert skill.startswith("---\nname: tidy\n") and "HELPFUL" in skill and "No rules yet" not in skill
    adopted = mem.read_text()
    assert adopted.startswith(MEMORY) and memory.block_text(adopted, "tidy") == RULE + "\n"

    # the CLI on the adopted project with the jail's own tool set (`--tools Read,Bash`, no Skill tool): Claude Code
    # then lists no skill by itself, and the jail names the project's skills in an appended system prompt
    assert commands.CLAUDE_TOOLS == "Read,Bash"
    ws = tmp_path / "again"
    shutil.copytree(project, ws, ignore=shutil.ignore_patterns(".skillopt"))
    policy = UsesTheSkill(harness)
    with ScriptedServer(policy=policy) as srv:
        gw = _gateway(srv.base_url, harness, tmp_path)
        settings = runner.AgentSettings(harness=harness, model="scripted", timeout_s=60, empty_retries=0)
        run = asyncio.run(runner.run_agent(gw, settings, ws, "Tidy the notes file.", "eval/test/after"))
        asyncio.run(gw.close())
    first = policy.requests[0]
    assert "tidy:" in first and "procedures and preferences" in first.lower()  # listed with its description
    assert "HELPFUL" in first  # the memory block, which the CLI reads by itself
    assert any(p.endswith("tidy/SKILL.md") for p in run.trace.files_read), run.trace.render()  # its session log
    assert any("HELPFUL" in r and "name: tidy" in r for r in policy.requests[1:])  # the body reached the model

    assert sleep_cli.main(["adopt", "--project", str(project), "--undo"]) == 0
    assert mem.read_text() == MEMORY and not live_skill.exists()
