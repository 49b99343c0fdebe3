"""`install-shells`: the thin shells that run `python -m skillopt_ray.sleep` from inside the agents, installed the
agents' own way: a Codex skill copied into the user's Codex skills folder, and the Claude Code plugin added with
Claude Code's own `plugin` commands from the repository's marketplace. Both are idempotent."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SKILL_NAME = "skillopt-sleep"
MARKETPLACE = "skillopt-ray"
PLUGIN = f"{SKILL_NAME}@{MARKETPLACE}"
SKILL_SOURCE = Path(__file__).parent / "codex_skill" / "SKILL.md"
MARKETPLACE_FILE = Path(".claude-plugin") / "marketplace.json"


class ShellRefused(ValueError):
    """A one-line refusal: what is in the way and what to do."""


@dataclass(frozen=True)
class ShellOptions:
    codex: bool = False
    claude: bool = False
    only_print: bool = False
    codex_home: Optional[Path] = None
    claude_bin: str = "claude"
    repo: Optional[Path] = None  # the checkout holding .claude-plugin/marketplace.json


def codex_skill_dir(codex_home: Optional[Path] = None) -> Path:
    """<codex home>/skills/skillopt-sleep: --codex-home, else $CODEX_HOME, else ~/.codex."""
    home = codex_home or Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    return home.expanduser() / "skills" / SKILL_NAME


def install_codex(codex_home: Optional[Path] = None, only_print: bool = False) -> str:
    """Copy the shipped SKILL.md; the same file already there is left alone, a different one is refused."""
    dest = codex_skill_dir(codex_home) / "SKILL.md"
    want = SKILL_SOURCE.read_text(encoding="utf-8")
    if dest.is_symlink() or (dest.exists() and not dest.is_file()):
        raise ShellRefused(f"{dest} is not a plain file; remove it, then run install-shells --codex again")
    if dest.is_file():
        if dest.read_text(encoding="utf-8", errors="replace") == want:
            return f"codex: the {SKILL_NAME} skill is already installed at {dest}"
        raise ShellRefused(
            f"{dest} holds a different {SKILL_NAME} skill; move it away (or give --codex-home) and run "
            "install-shells --codex again"
        )
    if only_print:
        return f"codex: would copy {SKILL_SOURCE} to {dest}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(".SKILL.md.tmp")
    tmp.write_text(want, encoding="utf-8")
    tmp.replace(dest)  # never a half-written skill
    return f"codex: installed the {SKILL_NAME} skill at {dest} (a new Codex session lists it)"


def repo_root(given: Optional[Path] = None) -> Path:
    """The checkout whose top level holds the plugin marketplace (the package's own source tree by default)."""
    root = (given or Path(__file__).resolve().parents[2]).expanduser().resolve()
    if not (root / MARKETPLACE_FILE).is_file():
        raise ShellRefused(
            f"no {MARKETPLACE_FILE} under {root}: the Claude Code plugin ships in the skillopt-ray repository; "
            "give --repo <your clone of it>"
        )
    return root


def claude_commands(claude_bin: str, repo: Path) -> list[list[str]]:
    """Claude Code's own commands that add the marketplace and install the plugin (both idempotent)."""
    return [
        [claude_bin, "plugin", "marketplace", "add", str(repo)],
        [claude_bin, "plugin", "install", PLUGIN],
    ]


def install_claude(opts: ShellOptions) -> str:
    cmds = claude_commands(opts.claude_bin, repo_root(opts.repo))
    hint = (
        f"claude: the plugin's commands use $SKILLOPT_SLEEP_PYTHON, else .venv/bin/python, python3 or python; "
        f"start Claude Code with SKILLOPT_SLEEP_PYTHON={shlex.quote(sys.executable)} to use this one"
    )
    if opts.only_print:
        return "\n".join([shlex.join(c) for c in cmds] + [hint])
    if shutil.which(opts.claude_bin) is None:
        raise ShellRefused(f"no Claude Code CLI '{opts.claude_bin}' on PATH; install it or give --claude-bin PATH")
    for c in cmds:
        p = subprocess.run(c, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            said = ((p.stderr or p.stdout).strip().splitlines() or [f"exit status {p.returncode}"])[-1][:300]
            raise ShellRefused(f"`{shlex.join(c)}` failed: {said}")
    return f"claude: installed the {PLUGIN} plugin (a new Claude Code session has /{SKILL_NAME}:status)\n{hint}"


def install(opts: ShellOptions) -> str:
    if not (opts.codex or opts.claude):
        raise ShellRefused("name the shells to install: --codex, --claude or both")
    out = []
    if opts.codex:
        out.append(install_codex(opts.codex_home, opts.only_print))
    if opts.claude:
        out.append(install_claude(opts))
    return "\n".join(out)
