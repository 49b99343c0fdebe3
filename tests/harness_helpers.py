"""Shared by the agent-harness tests: the agent policies and models the scripted server plays, the jail runs and the
Codex transcript pieces they read (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from conftest import need_bwrap, need_harness
from scripted_server import Policies

from skillopt_ray.harness import trace
from skillopt_ray.harness.jail import Jail, JailLimits, JailResult, jail_env
from skillopt_ray.harness.runner import (
    AgentSettings,
    _Attempt,
    run_agent,
)
from skillopt_ray.harness.skill_md import render_skill_md
from skillopt_ray.harness.workspace import WorkspaceSpec, prepare_workspace
from skillopt_ray.llm.agent_api import AgentReply, CallRecord

SKILL_FILE = ".agents/skills/skillopt-target/SKILL.md"
WORDS = 'echo "seccomp bwrap: execution error"'
PS_OUT = "root 1 0.0 0.0 3376 1428 ? Ss 06:09 0:00 /usr/bin/bwrap --die-with-parent --seccomp 9 --cap-drop ALL"


class AgentPolicy:
    """Target: read SKILL.md first (through the harness's own shell tool), then answer right only if the skill
    holds the rule for the task's type. Optimizer: the rule-gated scripted analysts."""

    def __init__(self, answers: dict):
        self.answers = answers
        self.optimizer = Policies(target="rule_gated", answers=answers)
        self.skill_reads: list[tuple[str, str]] = []  # (task id, path the skill was read from)
        self.target_calls = 0

    def __call__(self, body, headers):
        if headers.get("x-skillopt-role") != "target":
            return self.optimizer.answer(body, headers)
        if not body.get("tools"):  # a chat target: the rule-gated scripted reply
            return self.optimizer.answer(body, headers)
        self.target_calls += 1
        names = {t["function"]["name"] for t in body["tools"]}
        tool_text = "\n".join(str(m.get("content")) for m in body["messages"] if m["role"] == "tool")
        m = re.search(r"/([^/]+)/a\d+$", headers.get("x-skillopt-key", ""))
        task_id = m.group(1) if m else ""
        if 'name: "skillopt-target"' not in tool_text:
            cmd = f"cat {SKILL_FILE}"
            if "exec_command" in names:
                call = {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
            else:
                call = {"name": "Bash", "arguments": json.dumps({"command": cmd, "description": "read the skill"})}
            return {
                "content": "",
                "tool_calls": [{"id": f"call-{self.target_calls}", "type": "function", "function": call}],
            }
        # the skill reached the model as the output of the command that read SKILL_FILE
        assert "## Dynamic Guidance" in tool_text
        self.skill_reads.append((task_id, SKILL_FILE))
        task_type, right, wrong = self.answers[task_id]
        return right if f"RULE-{task_type}" in tool_text else wrong


def _gateway(url: str, harness: str, tmp: Path, mode: str = "record"):
    from skillopt_ray.config import from_container
    from skillopt_ray.llm.gateway import Gateway

    llm = {
        "backend": "compatible",
        "base_url": url,
        "cache_mode": mode,
        "target": {"provider": "openai", "model": "scripted", "harness": harness, "max_tokens": 256},
        "optimizer": {"provider": "openai", "model": "scripted"},
        "prices": {"scripted": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}},
    }
    cfg = from_container({"experiment": "_", "llm": llm}).llm
    return Gateway(cfg, str(tmp / "cache.sqlite"), str(tmp / "ledger.json"))


async def _eval(gw, bench, tasks, skill, key="eval/test"):
    from skillopt_envs.base import EpisodeContext

    from skillopt_ray.harness.agent_runner import episode_context

    ctx = await episode_context(gw, EpisodeContext(key, False, 1, 8))  # as an env actor hands it over
    out = [await bench.run_episode(t, skill, gw, ctx) for t in tasks]
    await gw.close()
    return out


class EscapingModel:
    """Asks the agent to run `script` once, then answers; keeps what the command printed."""

    def __init__(self, script: str):
        self.script = script
        self.output = ""

    async def agent_chat(self, req):
        tool_msgs = [m for m in req.messages if m["role"] == "tool"]
        if not tool_msgs:
            call = {"id": "", "name": "exec_command", "arguments": json.dumps({"cmd": self.script})}
            return AgentReply("", [call], 5, 5)
        self.output = str(tool_msgs[-1]["content"])
        return AgentReply("<answer>done</answer>", [], 5, 2)


def codex_noisy_commands() -> list[dict]:
    """`ps aux` (the jail's own --seccomp flag in its output), an echo of the alarming words, and `false`."""
    ev: list[dict] = []
    for cid, cmd, out, code in (("c0", "ps aux", PS_OUT, 0), ("c1", WORDS, "seccomp bwrap: execution error\n", 0),
                                ("c2", "false", "", 1)):  # fmt: skip
        ev += [_codex_call(cid, cmd), _codex_item(cid, cmd, out, code), _codex_output(cid, out, code)]
    return ev


def _attempt(harness: str, events: list[dict], *, rc: int = 0, calls: int = 2, started: bool = True, **res):
    t = trace.codex_session_trace(events, "/workspace") if harness == "codex" else trace.claude_session_trace(events)
    result = JailResult(rc, res.pop("stdout", ""), res.pop("stderr", ""), res.pop("timed_out", False),
                        res.pop("oom", False), 1.0, 10.0)  # fmt: skip
    recs = [CallRecord("responses", 5, 2, False, []) for _ in range(calls)]
    return _Attempt(result, result.stdout, recs, t, 0.5, started=started)


def _settings(harness: str, **kw) -> AgentSettings:
    return AgentSettings(harness, "m", 60.0, **kw)


class HostileModel:
    """Asks the agent to run `script` once, then answers; keeps what the command printed."""

    def __init__(self, script: str, harness: str = "codex"):
        self.script = script
        self.harness = harness
        self.output = ""

    async def agent_chat(self, req):
        tool_msgs = [m for m in req.messages if m["role"] == "tool"]
        if not tool_msgs:
            if self.harness == "codex":
                call = {"id": "", "name": "exec_command", "arguments": json.dumps({"cmd": self.script})}
            else:
                call = {"id": "", "name": "Bash", "arguments": json.dumps({"command": self.script})}
            return AgentReply("", [call], 5, 5)
        self.output = str(tool_msgs[-1]["content"])
        return AgentReply("<answer>done</answer>", [], 5, 2)


def _hostile_run(
    tmp_path: Path, monkeypatch, script: str, limits: JailLimits, memory_mb: int = 4096, harness: str = "codex"
):
    """Run `script` as the agent's one command under Codex (or Claude Code) in the real jail; return what the model
    saw, the run, and the host workspace. Checks that nothing is left on the host: no process of the jail's uid (the
    command prints it first), nothing in the temporary folder the runner used (a private one here)."""
    need_bwrap()
    need_harness("codex" if harness == "codex" else "claude")
    wd = tmp_path / "predictions" / "x" / "codex_exec"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="t"))
    host_tmp = Path(tempfile.mkdtemp(prefix="jl-"))  # short: the endpoint's socket path lies under it
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    model = HostileModel("echo JAIL-UID=$(id -u); " + script, harness)
    settings = AgentSettings(harness, "m", 60.0, memory_mb=memory_mb, limits=limits)
    t0 = time.monotonic()
    try:
        run = asyncio.run(run_agent(model, settings, wd, "go", "k"))
        assert time.monotonic() - t0 < 45  # ended, never hung
        uid = int(re.search(r"JAIL-UID=(\d+)", model.output).group(1))  # type: ignore[union-attr]
        if os.geteuid() == 0:  # as root the jail has a uid of its own: none of its processes may outlive it
            assert uid >= 200_000 and _uid_processes(uid) == []
        assert os.listdir(host_tmp) == []
    finally:
        shutil.rmtree(host_tmp, ignore_errors=True)  # a failed run must not leave it behind either
    return model.output, run, wd


def _jail(tmp_path: Path, limits: JailLimits = JailLimits()) -> tuple[Jail, Path]:
    need_bwrap()
    ws = tmp_path / "ws"
    ws.mkdir()
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    return Jail(tmp_path / "j", prefix, limits=limits), ws


def _run(jail: Jail, ws: Path, script: str, timeout_s: float = 30.0, memory_mb: int = 4096):
    env = jail_env(jail.home_path(), jail.prefix_path(), {})
    return asyncio.run(jail.run(ws, env, ["sh", "-c", script], timeout_s, memory_mb))


def _codex_item(cid: str, cmd: str, out: str, code: int, pid: str | None = "4242", cwd: str = "file:///workspace"):
    """A finished command as Codex 0.171.0 logs it (an `item_completed` event holding a CommandExecution)."""
    item = {
        "type": "CommandExecution",
        "id": cid,
        "command": ["/bin/bash", "-lc", cmd],
        "cwd": cwd,
        "source": "unified_exec_startup",
        "status": "completed" if code == 0 else "failed",
        "aggregated_output": out,
        "exit_code": code,
    }
    if pid is not None:
        item["process_id"] = pid
    return {"type": "event_msg", "payload": {"type": "item_completed", "item": item}}


def _codex_call(cid: str, cmd: str):
    args = json.dumps({"cmd": cmd})
    return {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command", "arguments": args, "call_id": cid}}  # fmt: skip


def _codex_output(cid: str, out: str, code: int):
    text = f"Chunk ID: ab12cd\nWall time: 0.0000 seconds\nProcess exited with code {code}\nOutput:\n{out}"
    return {"type": "response_item", "payload": {"type": "function_call_output", "call_id": cid, "output": text}}


def _uid_processes(uid: int) -> list[int]:
    found = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                if os.stat(f"/proc/{e}").st_uid == uid:
                    found.append(int(e))
            except OSError:
                pass
    return found


def start_error_without_model(tmp_path: Path, prefix: Path):
    """Run a Codex episode with the CLI under `prefix` and a model that must never be asked; the HarnessError it
    raises (an episode that failed before any model call)."""
    import pytest

    from skillopt_ray.harness.runner import HarnessError

    wd = tmp_path / "ws"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="t"))

    class NoModel:
        async def agent_chat(self, req):
            raise AssertionError("the model was called")

    with pytest.raises(HarnessError) as e:
        asyncio.run(run_agent(NoModel(), AgentSettings("codex", "m", 30.0, prefix=str(prefix)), wd, "go", "k"))
    return e.value
