"""Real session logs from the real agent CLIs (jailed, against the scripted server), for the harvest's fixtures.

`python tests/sleep_recording.py` rewrites tests/data/sessions/ (the committed fixtures); the slow test in
test_sleep_real_cli.py records fresh ones into a temporary folder and harvests them. The CLIs run through the
runner's own jail, whose private home is deleted afterwards: a copy of each session log is taken just before."""

from __future__ import annotations

import asyncio
import glob
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from scripted_server import ScriptedServer  # noqa: E402

PROJECT_MARK = "{PROJECT}"  # the recorded working folder, replaced by a test's own project when used
SESSIONS = {  # prompt -> the commands the scripted model runs before its final reply
    "Add a --verbose flag to the command line tool and explain what it prints.": ["cat README.md"],
    "Summarise what the demo skill asks for in two sentences.": ["cat .agents/skills/demo/SKILL.md"],
}
FINAL = "Done: the change is in place and the tests pass."


class ShellThenAnswer:
    """Target: run the session's commands through the CLI's own shell tool, one per call, then answer."""

    def __init__(self, commands: list[str]):
        self.commands = commands

    def __call__(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if not body.get("tools") or done >= len(self.commands):
            return FINAL
        names = {t["function"]["name"] for t in body["tools"]}
        cmd = self.commands[done]
        if "exec_command" in names:
            call = {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
        else:
            call = {"name": "Bash", "arguments": json.dumps({"command": cmd, "description": "look"})}
        return {"content": "", "tool_calls": [{"id": f"call-{done}", "type": "function", "function": call}]}


def demo_project(root: Path) -> Path:
    """A small git repository with a README and one skill."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("# demo\n\nA tiny tool.\n")
    skill = root / ".agents" / "skills" / "demo"
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text('---\nname: "demo"\ndescription: "demo"\n---\nAnswer briefly.\n')
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "init"]):
        subprocess.run(["git", *cmd], cwd=root, check=True)
    return root


def _gateway(url: str, harness: str, tmp: Path) -> Any:
    from skillopt_ray.config import from_container
    from skillopt_ray.llm.gateway import Gateway

    llm = {
        "backend": "compatible",
        "base_url": url,
        "cache_mode": "off",
        "target": {"provider": "openai", "model": "scripted", "harness": harness, "max_tokens": 256},
        "optimizer": {"provider": "openai", "model": "scripted"},
    }
    return Gateway(from_container({"experiment": "_", "llm": llm}).llm, None, str(tmp / "ledger.json"))


def small(text: str, workspace: str) -> str:
    """The log with the jail's workspace path as PROJECT_MARK and long strings (Codex's 21 kB base instructions)
    cut: same records, same kinds, a few kB."""

    def cut(v: Any) -> Any:
        if isinstance(v, str) and len(v) > 1500:
            return v[:200] + " [cut for the fixture]"
        if isinstance(v, dict):
            return {k: cut(x) for k, x in v.items()}
        if isinstance(v, list):
            return [cut(x) for x in v]
        return v

    lines = [json.dumps(cut(json.loads(ln))) for ln in text.splitlines() if ln.strip()]
    mark = re.compile(re.escape(workspace) + r"(?![\w])")
    return "".join(mark.sub(PROJECT_MARK, ln) + "\n" for ln in lines)


def record(harness: str, project: Path, out: Path, tmp: Path) -> list[Path]:
    """Run each session's prompt with the real CLI in `project`; copy the session logs it wrote to `out`."""
    from skillopt_ray.harness import runner
    from skillopt_ray.harness.jail import JAIL_WORKSPACE

    pattern = ".codex/sessions/**/*.jsonl" if harness == "codex" else ".claude/projects/**/*.jsonl"
    kept: list[Path] = []
    real = runner._session_events

    def copying(home: Path, h: str) -> list[dict[str, Any]]:
        for f in sorted(glob.glob(str(home / pattern), recursive=True)):
            rel = Path(f).relative_to(home / (".codex" if h == "codex" else ".claude"))
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(small(Path(f).read_text("utf-8"), JAIL_WORKSPACE), encoding="utf-8")
            kept.append(dest)
        return real(home, h)

    runner._session_events = copying  # type: ignore[assignment]
    try:
        for prompt, commands in SESSIONS.items():
            with ScriptedServer(policy=ShellThenAnswer(commands)) as srv:
                gw = _gateway(srv.base_url, harness, tmp)
                settings = runner.AgentSettings(harness=harness, model="scripted", timeout_s=180, empty_retries=0)
                ws = tmp / f"ws-{harness}-{len(kept)}"
                shutil.copytree(project, ws)
                asyncio.run(runner.run_agent(gw, settings, ws, prompt, "eval/test/rec"))
                asyncio.run(gw.close())
    finally:
        runner._session_events = real  # type: ignore[assignment]
    return kept


if __name__ == "__main__":
    import tempfile

    here = Path(__file__).parent / "data" / "sessions"
    with tempfile.TemporaryDirectory() as t:
        proj = demo_project(Path(t) / "demo")
        for h, sub in (("codex", "codex"), ("claude_code", "claude")):
            shutil.rmtree(here / sub, ignore_errors=True)
            for p in record(h, proj, here / sub, Path(t)):
                print(p, p.stat().st_size)
