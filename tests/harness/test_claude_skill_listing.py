"""Claude Code sees the adopted skill with the jail's tool set (issue 47, item 8): with `--tools Read,Bash` it has no
Skill tool and lists no skill by itself, so the jail names the workspace's `.claude/skills/*/SKILL.md` in an appended
system prompt. The real CLI, jailed, against the scripted server: its first request lists the skill with its
description, and its session reads SKILL.md. The listing reads hostile files: links are not followed, and each
name and description is one bounded line."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import need_bwrap, need_harness
from scripted_server import ScriptedServer
from sleep_recording import _gateway

from skillopt_ray.harness import commands, runner, skill_list

SKILL = "---\nname: tidy\ndescription: Procedures and preferences for tidying the notes file.\n---\n\nRule ZEBRA-7.\n"


def with_skill(root: Path, text: str = SKILL, name: str = "tidy") -> Path:
    folder = root / ".claude" / "skills" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(text)
    return root


def test_the_listing_names_each_skill_with_its_description_and_path(tmp_path):
    ws = with_skill(tmp_path)
    text = skill_list.listing(ws)
    assert text.splitlines()[1] == (
        "- tidy: Procedures and preferences for tidying the notes file. (read .claude/skills/tidy/SKILL.md)"
    )
    assert skill_list.listing(tmp_path / "none") == ""
    argv = commands.claude_argv("claude", "/ws", "do it", append_system=text)
    assert argv[argv.index("--tools") + 1] == "Read,Bash" and argv[argv.index("--append-system-prompt") + 1] == text
    assert argv[-2:] == ["--", "do it"]


def test_hostile_skill_files_are_bounded_and_links_never_followed(tmp_path):
    ws = tmp_path / "ws"
    with_skill(ws, "---\nname: a\\x1b[2Jb\ndescription: " + "x" * 5000 + "\n---\n", "long")
    (ws / ".claude" / "skills" / "long" / "SKILL.md").write_text(
        "---\nname: bad\x1b[2J\ndescription: line one\rinjected: yes\n---\n"
    )
    secret = tmp_path / "secret.md"
    secret.write_text("---\nname: leaked\ndescription: host file\n---\n")
    linked = ws / ".claude" / "skills" / "linked"
    linked.mkdir()
    os.symlink(secret, linked / "SKILL.md")
    os.symlink(tmp_path, ws / ".claude" / "skills" / "dirlink")
    text = skill_list.listing(ws)
    assert "leaked" not in text and "host file" not in text
    assert len(text.splitlines()) == 2 and "\x1b" not in text and "\r" not in text
    with_skill(ws, "---\nname: big\ndescription: " + "y" * 5000 + "\n---\n", "big")
    big = [ln for ln in skill_list.listing(ws).splitlines() if ln.startswith("- big")][0]
    assert len(big) < skill_list.MAX_DESCRIPTION + 100


class ReadsListedSkill:
    """The model: when a request lists the skill `tidy`, read its SKILL.md with the shell; then answer."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        self.requests.append(body)
        if "- tidy: " in json.dumps(body) and not any(m["role"] == "tool" for m in body["messages"]):
            call = {"name": "Read", "arguments": json.dumps({"file_path": ".claude/skills/tidy/SKILL.md"})}
            names = {t["function"]["name"] for t in body.get("tools") or []}
            if "Read" not in names:
                call = {"name": "Bash", "arguments": json.dumps({"command": "cat .claude/skills/tidy/SKILL.md"})}
            return {"content": "", "tool_calls": [{"id": "r0", "type": "function", "function": call}]}
        return "Done."


@pytest.mark.slow
def test_the_real_claude_code_with_read_and_bash_lists_and_reads_the_adopted_skill(tmp_path):
    need_bwrap()
    need_harness("claude")
    ws = with_skill(tmp_path / "ws")
    policy = ReadsListedSkill()
    with ScriptedServer(policy=policy) as srv:
        gw = _gateway(srv.base_url, "claude_code", tmp_path)
        settings = runner.AgentSettings(harness="claude_code", model="scripted", timeout_s=90, empty_retries=0)
        run = asyncio.run(runner.run_agent(gw, settings, ws, "Tidy the notes file.", "eval/test/skill"))
        asyncio.run(gw.close())
    first = policy.requests[0]
    assert sorted(t["function"]["name"] for t in first.get("tools") or []) == ["Bash", "Read"]  # no Skill tool
    assert "- tidy: Procedures and preferences for tidying the notes file." in json.dumps(first)
    assert any(p.endswith("tidy/SKILL.md") for p in run.trace.files_read), run.trace.render()
    assert any("ZEBRA-7" in json.dumps(r) for r in policy.requests[1:])  # the skill's body reached the model
