"""The skills you already use: each harvested task names the one skill its session used (`skill_hint`: a SKILL.md
the Codex session read, a Skill call or SKILL.md read of Claude Code); a night routes the task to that skill when
the skill is installed where a CLI loads it, so the learned edits go into it rather than a separate skill. Tasks
whose skill is not found, or whose session used none or several, train the night's own learned skill."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from skillopt_ray.sleep.proposal import skill_home

OWN = "skillopt-sleep"  # this tool's own skill for Codex: never trained on the sessions that ran it
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


@dataclass
class Route:
    """A skill and the tasks that exercised it; `live` None is the night's learned skill (--name)."""

    name: str
    live: Optional[Path]
    tasks: list[str] = field(default_factory=list)


def skill_file(project: Path, target: str, name: str) -> Optional[Path]:
    """The installed SKILL.md of a used skill: the night's target's project and user skill folders first, then the
    other CLI's (a skill read in a Codex session may live in .claude/skills too). A symlink is not followed."""
    if not _NAME.match(name) or name == OWN:
        return None
    order = [target] + [t for t in skill_home.TARGETS if t != target]
    for t in order:
        for where in skill_home.INSTALL_TO:
            path = skill_home.skills_root(project, t, where) / name / "SKILL.md"
            if path.is_file() and not path.is_symlink() and not os.path.islink(path.parent):
                return path
    return None


def routes_of(project: Path, target: str, folder: Path, learned: str) -> list[Route]:
    """The folder's tasks grouped by the skill they route to, used skills first (by name), the learned skill last;
    [] when no task routes to an installed skill (the night trains its learned skill on every task, as before)."""
    used: dict[str, Route] = {}
    rest = Route(learned, None)
    for t in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            meta = json.loads((t / "task.json").read_text(encoding="utf-8")).get("metadata") or {}
        except (OSError, ValueError, AttributeError):
            continue
        hint = str(meta.get("skill_hint") or "")
        path = skill_file(project, target, hint) if hint and hint != learned else None
        if path is None:
            rest.tasks.append(t.name)
            continue
        used.setdefault(hint, Route(hint, path)).tasks.append(t.name)
    if not used:
        return []
    return [used[k] for k in sorted(used)] + ([rest] if rest.tasks else [])
