"""The agent's jail: told to reach another host or port, read the home folder or a key, or write outside its
workspace, it fails to; the only key it holds is its own endpoint's token."""

from __future__ import annotations

import asyncio
import os

from conftest import need_bwrap, need_harness
from harness_helpers import EscapingModel

from skillopt_ray.harness.runner import AgentSettings, run_agent
from skillopt_ray.harness.skill_md import render_skill_md
from skillopt_ray.harness.workspace import WorkspaceSpec, prepare_workspace


def test_agent_cannot_reach_the_network_read_home_or_keys_or_write_outside(tmp_path):
    need_bwrap()
    need_harness("codex")
    import socket

    listener = socket.socket()  # a host port the agent must not reach
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    outside = tmp_path / "outside.txt"
    secret = tmp_path / "id_secret"
    secret.write_text("TOP-SECRET-KEY-MATERIAL")
    os.environ["SKILLOPT_TEST_API_KEY"] = "sk-must-not-leak"
    script = "; ".join(
        [
            f"""node -e "const s=require('net').connect({port},'127.0.0.1');s.on('connect',()=>{{console.log('NET-REACHED');process.exit(0)}});s.on('error',e=>{{console.log('NET-FAILED '+e.code);process.exit(0)}})" """,
            """node -e "require('dns').lookup('example.com',(e,a)=>console.log(e?'DNS-FAILED':'DNS-OK '+a))" """,
            f"cat {secret} || echo KEY-UNREADABLE",
            "ls -A /root 2>&1 | head -3; echo HOME-LISTED",
            "env | grep -i -E 'api_key|sk-must' || echo NO-KEYS",
            f"echo pwned > {outside} || echo WRITE-FAILED",
            "echo pwned > /usr/escape.txt || echo USR-WRITE-FAILED",
            "echo inside > ok.txt && echo WS-WRITE-OK",
        ]
    )
    wd = tmp_path / "predictions" / "x" / "codex_exec"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="t"))
    model = EscapingModel(script)
    try:
        run = asyncio.run(run_agent(model, AgentSettings("codex", "m", 60.0), wd, "go", "k"))
    finally:
        os.environ.pop("SKILLOPT_TEST_API_KEY", None)
        listener.close()
    out = model.output
    assert run.final_message == "<answer>done</answer>"
    assert "NET-FAILED" in out and "NET-REACHED" not in out
    assert "DNS-FAILED" in out
    assert "TOP-SECRET" not in out and "KEY-UNREADABLE" in out
    assert "sk-must-not-leak" not in out and "NO-KEYS" in out
    assert not outside.exists() and "WRITE-FAILED" in out
    assert not os.path.exists("/usr/escape.txt") and "USR-WRITE-FAILED" in out
    assert (wd / "ok.txt").read_text() == "inside\n" and "WS-WRITE-OK" in out


def test_codex_own_sandbox_inside_the_jail_is_refused_before_the_cli_starts(tmp_path):
    """Codex's own workspace-write sandbox needs user namespaces, which the jail refuses: every command would fail
    while `codex exec` still exits 0 with an answer. The episode is refused up front as an infra error, never run
    and never scored."""
    need_bwrap()
    need_harness("codex")
    from skillopt_ray.harness.episode import HarnessTask, run_harness_task

    model = EscapingModel("cat task.md")
    settings = {"harness": "codex", "model": "m", "agent": {"codex_sandbox": "workspace-write", "timeout_s": 60}}
    ht = HarnessTask("D", "", "the task", "Read task.md.", 60.0)
    out = asyncio.run(run_harness_task(model, settings, "t1", "", ht, "k"))
    assert out.run is None and out.error_kind == "sandbox_start"
    assert "codex_sandbox=workspace-write" in out.error and "danger-full-access" in out.error
    assert model.output == ""  # the model was never asked anything
