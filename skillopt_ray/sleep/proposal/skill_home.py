"""Where a learned skill lives: a folder with SKILL.md (front matter `name`, `description`) in the place each CLI
loads skills from, so the agent reads it without being told."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

TARGETS = ("chat", "codex", "claude_code")
INSTALL_TO = ("project", "user")
DEFAULT_NAME = "learned"
DEFAULT_DESCRIPTION = "Procedures and preferences learned from this project's own sessions; read before working here."
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_FRONT = re.compile(r"\A---\n(.*?)\n---\n?", re.S)


@dataclass(frozen=True)
class SkillDoc:
    """A SKILL.md split in two: the front matter (kept as it is) and the body (what training edits)."""

    name: str
    description: str
    front: str  # the front matter's lines, without the --- fences
    body: str

    def text(self, body: Optional[str] = None) -> str:
        return f"---\n{self.front}\n---\n\n{(self.body if body is None else body).strip()}\n"


def parse(text: str, fallback_name: str = DEFAULT_NAME) -> SkillDoc:
    """A skill file with or without front matter; a missing name or description gets the default."""
    m = _FRONT.match(text)
    front, body = (m.group(1), text[m.end() :]) if m else ("", text)
    fields = dict(
        (k.strip(), v.strip().strip("\"'")) for k, _, v in (ln.partition(":") for ln in front.splitlines()) if v
    )
    name = fields.get("name") or fallback_name
    desc = fields.get("description") or DEFAULT_DESCRIPTION
    lines = [ln for ln in front.splitlines() if ln.strip()]
    if "name" not in fields:
        lines.insert(0, f"name: {name}")
    if "description" not in fields:
        lines.insert(1, f"description: {desc}")
    return SkillDoc(name, desc, "\n".join(lines), body)


# the custom benchmark's starting skill (a night with no hand-written skill trains from it): a placeholder for the
# optimizer, not guidance, so it is cut from what a night proposes to install
SEED_SKILL = "# Skill\n\nNo rules yet: training adds what it learns about these tasks here.\n"


def without_seed(body: str) -> str:
    """The learned body without the seed's placeholder line, and its heading when that heading opens the body (a
    body without the placeholder is returned as it is)."""
    head, line = (part.strip() for part in SEED_SKILL.split("\n\n", 1))
    if line not in body:
        return body
    out = body.replace(line, "", 1).strip()
    if out == head or out.startswith(head + "\n"):
        out = out[len(head) :].strip()
    return re.sub(r"\n{3,}", "\n\n", out) + "\n" if out else ""


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"skill name {name!r} is not usable as a folder; use lower-case letters, digits and -")
    return name


def skills_root(project: Path, target: str, install_to: str) -> Path:
    """The folder of skills the target's CLI loads: Codex `.agents/skills` or `$CODEX_HOME/skills`; Claude Code
    `.claude/skills` or `$CLAUDE_CONFIG_DIR/skills` (default `~/.claude/skills`). A chat target has no CLI: the
    project's `.agents/skills`."""
    if install_to == "user":
        if target == "claude_code":
            return Path(os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude").expanduser() / "skills"
        return Path(os.environ.get("CODEX_HOME") or "~/.codex").expanduser() / "skills"
    return project / (".claude" if target == "claude_code" else ".agents") / "skills"


def live_path(project: Path, target: str, install_to: str, name: str, start: Optional[Path] = None) -> Path:
    """The SKILL.md a night proposes to replace: the hand-written one it started from (--skill), else the learned
    skill's place for this CLI."""
    if start is not None:
        return start
    return skills_root(project, target, install_to) / check_name(name) / "SKILL.md"
