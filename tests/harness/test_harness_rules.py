"""The reference's exec-harness rules: SKILL.md bytes, workspace layout, argv, effort mapping, trace summary,
denied paths; and the empty-reply retry and raw fallback with the real CLIs against a scripted model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conftest import need_bwrap, need_harness

from skillopt_ray.harness import commands
from skillopt_ray.harness.skill_md import EMPTY_GUIDANCE, render_skill_md
from skillopt_ray.harness.trace import codex_trace_summary
from skillopt_ray.harness.workspace import WorkspaceSpec, check_paths, prepare_workspace


def test_skill_md_bytes():
    got = render_skill_md("  rule 1  ", description="D", preamble="Line A\nLine B")
    want = [
        "---",
        'name: "skillopt-target"',
        'description: "D"',
        "---",
        "",
        "# ReflACT Target Skill",
        "",
        "Line A",
        "Line B",
        "",
        "## Dynamic Guidance",
        "",
        "rule 1",
        "",
    ]
    assert got == "\n".join(want)
    assert got.endswith("rule 1\n")
    blank = render_skill_md("   ", description="D")
    assert blank.split("\n")[-2] == EMPTY_GUIDANCE and "Line A" not in blank
    assert blank.split("\n")[6:9] == ["", "## Dynamic Guidance", ""]


def test_workspace_layout(tmp_path):
    img = tmp_path / "src" / "q1_d2.png"
    img.parent.mkdir()
    img.write_bytes(b"\x89PNG")
    docs = tmp_path / "corpus"
    docs.mkdir()
    wd = tmp_path / "predictions" / "q1" / "codex_exec"
    wd.mkdir(parents=True)
    (wd / "stale.txt").write_text("old")
    prepare_workspace(wd, "SKILL", WorkspaceSpec(task="T", link_dirs={"docs/root_1": str(docs)}, images=[str(img)]))
    assert (wd / ".agents/skills/skillopt-target/SKILL.md").read_text() == "SKILL"
    assert (wd / "task.md").read_text() == "T"
    assert (wd / "attachments/01_q1_d2.png").read_bytes() == b"\x89PNG"
    assert (
        f"- `attachments/01_q1_d2.png` (source: `{img.resolve()}`)" in (wd / "ATTACHMENTS.md").read_text().splitlines()
    )
    assert (wd / "docs/root_1").is_symlink() and (wd / "docs/root_1").resolve() == docs.resolve()
    assert not (wd / "stale.txt").exists()  # deleted and recreated
    assert not (wd / "AGENTS.md").exists() and not (wd / "CLAUDE.md").exists()
    assert not any(p.name in ("AGENTS.md", "CLAUDE.md") for p in wd.rglob("*"))
    empty = tmp_path / "w2"
    prepare_workspace(empty, "S", WorkspaceSpec(task=""))
    assert not (empty / "task.md").exists()  # written only when the task is not empty
    with pytest.raises(FileNotFoundError):
        prepare_workspace(tmp_path / "w3", "S", WorkspaceSpec(images=[str(tmp_path / "missing.png")]))


def test_codex_default_argv():
    argv = commands.codex_argv("codex", "/wd", "PROMPT", "gpt-5.5", images=("img.png",))
    assert argv == [
        "codex", "exec", "--skip-git-repo-check", "--color", "never", "-C", "/wd",
        "-c", 'model_reasoning_effort="none"', "--sandbox", "workspace-write", "-c", 'approval_policy="never"',
        "-c", "sandbox_workspace_write.network_access=false", "-c", 'web_search="disabled"', "-m", "gpt-5.5",
        "-i", "img.png", "--output-last-message", "/wd/codex_last_message.txt", "PROMPT",
    ]  # fmt: skip


def test_claude_argv_and_effort_mapping():
    assert commands.claude_effort("xhigh") == "max"
    assert commands.claude_effort("none") == ""
    assert commands.claude_effort("off") == ""
    assert commands.claude_effort("") == "medium"  # empty or missing: the reference's default, not no flag
    assert commands.claude_effort(None) == "medium" and commands.claude_effort("  ") == "medium"
    assert commands.claude_effort(" XHigh ") == "max" and commands.claude_effort(" Off ") == ""
    assert commands.claude_effort("bogus") == "medium"
    assert [commands.claude_effort(v) for v in ("low", "medium", "high", "max")] == ["low", "medium", "high", "max"]
    assert (commands.sdk_mode("yes"), commands.sdk_mode("cli"), commands.sdk_mode("whatever")) == ("sdk", "cli", "auto")
    argv = commands.claude_argv("claude", "/wd", "P", model="anthropic/claude-sonnet-4-6", effort="xhigh")
    assert argv[:12] == [
        "claude", "-p", "--output-format", "text", "--permission-mode", "bypassPermissions", "--add-dir", "/wd",
        "--tools", "Read,Bash", "--allowedTools", "Read,Bash",
    ]  # fmt: skip
    assert argv[12:] == ["--model", "claude-sonnet-4-6", "--effort", "max", "--", "P"]
    assert "--effort" not in commands.claude_argv("claude", "/wd", "P", effort="none")
    assert commands.claude_argv("claude", "/wd", "P", effort="")[-4:] == ["--effort", "medium", "--", "P"]
    ep = commands.exec_prompt("Use the `skillopt-target` skill in this workspace.\nSolve it.")
    assert ".agents/skills/skillopt-target/SKILL.md" in ep and ep.endswith("Solve it.")
    assert "Skill tool" in ep.split("\n\n", 1)[1]  # the use-the-skill line became a read-the-file line


@pytest.mark.parametrize("agent", [{}, {"claude_effort": None}, {"claude_effort": ""}, {"claude_effort": " "}])
def test_claude_code_launch_sends_medium_when_the_effort_is_empty_or_missing(tmp_path, agent):
    """The argv the runner hands the jail, from the gateway's settings: an empty or missing effort is medium."""
    from skillopt_ray.harness.jail import Jail
    from skillopt_ray.harness.runner import AgentSettings, _cli_launch, _CliOptions

    s = AgentSettings.from_gateway({"harness": "claude_code", "model": "m", "agent": agent}, 60.0)
    jail = Jail(tmp_path / "j", tmp_path / "prefix", "none")
    argv, _env = _cli_launch(s, jail, tmp_path / "j", tmp_path / "ws", "P", "tok", _CliOptions())
    assert argv[argv.index("--effort") + 1] == "medium"
    off = AgentSettings.from_gateway({"harness": "claude_code", "model": "m", "agent": {"claude_effort": "off"}}, 60)
    assert "--effort" not in _cli_launch(off, jail, tmp_path / "j", tmp_path / "ws", "P", "tok", _CliOptions())[0]


def test_codex_trace_summary():
    transcript = "\n".join(
        [
            "sandbox: workspace-write",
            "exec cat task.md in /wd",
            " succeeded in 3ms:",
            "Question ...",
            "exec cat .agents/skills/skillopt-target/SKILL.md in /wd",
            "ERROR: no such file",
            "tokens used",
            "1,234",
        ]
    )
    s = codex_trace_summary(transcript, "<answer> c </answer>").splitlines()
    assert s[0] == "Codex Trace Summary"
    assert "- sandbox: workspace-write" in s
    assert "- read task.md: success" in s
    assert "- read SKILL.md: failed" in s
    assert "- shell/tool errors: no such file" in s
    assert "- final answer format: well_formed" in s
    assert "- final answer label: C" in s
    assert "- tokens used: 1,234" in s
    assert "- final answer format: tagged_nonlabel" in codex_trace_summary("", "<answer>Paris</answer>")
    assert "- final answer format: missing" in codex_trace_summary("", "  ")


def test_denied_paths(tmp_path):
    bad = tmp_path / "data" / "officeqa_split" / "docs"
    bad.mkdir(parents=True)
    with pytest.raises(ValueError, match="officeqa_split"):
        check_paths([bad])
    link = tmp_path / "innocent"
    link.symlink_to(tmp_path / "data" / "officeqa_split")
    with pytest.raises(ValueError):
        check_paths([link])  # resolved first
    with pytest.raises(ValueError, match="sealqa_split"):
        check_paths([tmp_path / "sealqa_split"])
    wd = tmp_path / "ws"
    with pytest.raises(ValueError):
        prepare_workspace(wd, "S", WorkspaceSpec(link_dirs={"docs/root_1": str(bad)}))
    assert not wd.exists()  # refused before anything was written
    check_paths([tmp_path / "data"])


# ---------- retry and fallback with the real CLIs ----------


class ScriptedAgentModel:
    """A stand-in for the gateway's agent_chat: replies in order from `script` (None = sleep for a long time)."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []

    async def agent_chat(self, req):
        from skillopt_ray.llm.agent_api import AgentReply

        self.requests.append(req)
        nxt = self.script.pop(0) if self.script else ""
        if nxt is None:
            await asyncio.sleep(60)
        return AgentReply(nxt, [], 5, 2)


def _run(harness, model, tmp_path, timeout_s=60.0, retries=1):
    from skillopt_ray.harness.runner import AgentSettings, run_agent

    wd = tmp_path / "predictions" / "x" / "codex_exec"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="Say something."))
    s = AgentSettings(harness, "gpt-5.5", timeout_s, empty_retries=retries)
    return asyncio.run(run_agent(model, s, wd, "Read task.md and answer.", "k"))


def _user_texts(req) -> str:
    return "\n".join(str(m.get("content")) for m in req.messages if m["role"] == "user")


def test_codex_empty_reply_is_retried_once_with_the_retry_paragraph(tmp_path):
    need_bwrap()
    need_harness("codex")
    model = ScriptedAgentModel(["", "<answer>ok</answer>"])
    run = _run("codex", model, tmp_path)
    assert run.attempts == 2 and run.final_message == "<answer>ok</answer>"
    assert "previous attempt ended without a final message" not in _user_texts(model.requests[0])
    assert "previous attempt ended without a final message" in _user_texts(model.requests[1])


def test_codex_non_empty_reply_is_not_retried(tmp_path):
    need_bwrap()
    need_harness("codex")
    model = ScriptedAgentModel(["<answer>one</answer>", "<answer>two</answer>"])
    run = _run("codex", model, tmp_path)
    assert run.attempts == 1 and len(model.requests) == 1 and run.response == "<answer>one</answer>"


def test_claude_timeout_is_an_empty_reply_retried_then_the_raw_transcript_is_scored(tmp_path):
    need_bwrap()
    need_harness("claude")
    model = ScriptedAgentModel([None, None])
    run = _run("claude_code", model, tmp_path, timeout_s=6.0)
    assert run.attempts == 2 and run.final_message == ""
    assert run.response == run.raw and "CLAUDE CLI ATTEMPT 2" in run.raw  # the raw fallback


def test_codex_all_empty_falls_back_to_raw(tmp_path):
    need_bwrap()
    need_harness("codex")
    model = ScriptedAgentModel(["", ""])
    run = _run("codex", model, tmp_path)
    assert run.attempts == 2 and run.final_message == ""
    assert run.response == run.raw and "OpenAI Codex" in run.raw
    assert json.dumps(run.raw)  # a plain string
    assert Path(tmp_path).exists()


def test_usage_reconciliation():
    from skillopt_ray.harness.trace import AgentTrace, reconcile

    same = AgentTrace(input_tokens=10, output_tokens=4, usage_reports=2)
    assert reconcile(same, 2, 10, 4) is None
    off = reconcile(AgentTrace(input_tokens=9, output_tokens=4, usage_reports=2), 2, 10, 4)
    assert off is not None and "9+4" in off and "10+4" in off
    assert "no usage" in reconcile(AgentTrace(), 1, 3, 1)
