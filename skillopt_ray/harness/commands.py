"""The agent CLIs' command lines and prompts, as the reference builds them for its exec targets."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Optional

from skillopt_ray.harness.skill_md import SKILL_PATH

CODEX_LAST_MESSAGE = "codex_last_message.txt"
CLAUDE_TOOLS = "Read,Bash"


CODEX_PACKAGE = "lib/node_modules/@openai/codex"  # under the npm prefix
_CODEX_TARGETS = {"x86_64": ("codex-linux-x64", "x86_64-unknown-linux-musl"),
                  "aarch64": ("codex-linux-arm64", "aarch64-unknown-linux-musl")}  # fmt: skip


def codex_native(prefix: Path) -> Optional[str]:
    """Codex's own binary under the npm prefix (relative to it), or None. The npm package's `codex` is a Node
    script that runs it, on Node before 22.15 as a child: a child the agent's commands can kill (`pkill codex`)
    while the jail's first process, the script, lives on. Run directly, Codex is that first process itself."""
    pkg, triple = _CODEX_TARGETS.get(platform.machine(), ("", ""))
    if not pkg:
        return None
    for rel in (
        f"{CODEX_PACKAGE}/node_modules/@openai/{pkg}/vendor/{triple}/bin/codex",
        f"lib/node_modules/@openai/{pkg}/vendor/{triple}/bin/codex",
        f"{CODEX_PACKAGE}/vendor/{triple}/bin/codex",
    ):
        if (prefix / rel).is_file():
            return rel
    return None


def claude_effort(value: Optional[str]) -> str:
    """The --effort value for Claude Code ("" = no flag): none/off send no flag, an empty or missing value is the
    default medium (what the reference's code sends), xhigh becomes max, the four known levels pass, anything
    else becomes medium."""
    v = (value or "").strip().lower()
    if v in ("none", "off"):
        return ""
    if not v:
        return "medium"
    if v == "xhigh":
        return "max"
    return v if v in ("low", "medium", "high", "max") else "medium"


def sdk_mode(value: str) -> str:
    """The reference's SDK-mode switch: sdk, cli or auto (unknown values)."""
    v = (value or "").strip().lower()
    if v in ("1", "true", "yes", "on", "sdk"):
        return "sdk"
    if v in ("0", "false", "no", "off", "cli"):
        return "cli"
    return "auto"


def codex_argv(
    codex: str,
    work_dir: str,
    prompt: str,
    model: str,
    effort: str = "none",
    sandbox: str = "workspace-write",
    approval: str = "never",
    network: bool = False,
    web_search: bool = False,
    profile: str = "",
    images: tuple[str, ...] = (),
    extra_config: tuple[str, ...] = (),
) -> list[str]:
    """`codex exec` as the reference runs it, prompt last. `extra_config` (-c pairs pointing Codex at the
    project's endpoint and turning off its outside traffic) goes before --output-last-message."""
    argv = [codex, "exec", "--skip-git-repo-check", "--color", "never", "-C", work_dir]
    if profile:
        argv += ["-p", profile]
    if effort:  # "none" is a non-empty string, so the reference sends it
        argv += ["-c", f'model_reasoning_effort="{effort}"']
    argv += ["--sandbox", sandbox]
    if approval:
        argv += ["-c", f'approval_policy="{approval}"']
    argv += ["-c", f"sandbox_workspace_write.network_access={'true' if network else 'false'}"]
    argv += ["-c", f'web_search="{"live" if web_search else "disabled"}"']
    if model:
        argv += ["-m", model]
    for img in images:
        argv += ["-i", img]
    for pair in extra_config:
        argv += ["-c", pair]
    argv += ["--output-last-message", f"{work_dir}/{CODEX_LAST_MESSAGE}", prompt]
    return argv


def claude_argv(
    claude: str,
    work_dir: str,
    prompt: str,
    model: str = "",
    effort: str = "medium",
    max_thinking_tokens: int = 0,
    permission_mode: str = "bypassPermissions",
    add_dirs: tuple[str, ...] = (),
    append_system: str = "",
) -> list[str]:
    """`claude -p` as the reference runs it, the exec prompt after `--`. Claude Code 2.1.197 has no
    --max-thinking-tokens flag; the cap goes in through MAX_THINKING_TOKENS in its environment instead.
    `append_system` (the workspace's skills, skill_list.py) goes in with --append-system-prompt."""
    argv = [claude, "-p", "--output-format", "text", "--permission-mode", permission_mode, "--add-dir", work_dir]
    argv += ["--tools", CLAUDE_TOOLS, "--allowedTools", CLAUDE_TOOLS]
    if model:
        argv += ["--model", model.removeprefix("anthropic/")]
    e = claude_effort(effort)
    if e:
        argv += ["--effort", e]
    for d in add_dirs:
        argv += ["--add-dir", d]
    if append_system:
        argv += ["--append-system-prompt", append_system]
    return argv + ["--", prompt]


def normalize_prompt(prompt: str) -> str:
    """Lines telling the agent to use the skill become lines telling it to read SKILL.md directly."""
    out = []
    for line in prompt.splitlines():
        if "skillopt-target" in line and "skill" in line.lower() and SKILL_PATH not in line:
            out.append(f"Read `{SKILL_PATH}` in this workspace and follow it (do not call a Skill tool).")
        else:
            out.append(line)
    return "\n".join(out)


def exec_prompt(prompt: str, allow_file_edits: bool = False) -> str:
    """The paragraph the reference puts before the prompt for Claude Code, then the normalised prompt."""
    edits = (
        "You may create or edit files in the workspace when the task asks for an artifact."
        if allow_file_edits
        else "Do not modify any files."
    )
    head = (
        "Work from the files in the current workspace. First read `task.md` and "
        f"`{SKILL_PATH}`; if `ATTACHMENTS.md` exists, read it too. Do not call a Skill tool and do not ask for "
        f"permissions. {edits} Reply with only the final answer text, keeping the answer tags the task asks for."
    )
    return head + "\n\n" + normalize_prompt(prompt)


def retry_prompt(prompt: str) -> str:
    """The prompt of a retry after an empty final message: the original, then a paragraph saying so."""
    return prompt + (
        "\n\nYour previous attempt ended without a final message. Read `task.md` and "
        f"`{SKILL_PATH}` again, use `ATTACHMENTS.md` if it exists, and end with your answer inside the answer tags."
    )
