"""The miner without a model (`--no-model`, and the fallback when the model's reply is unusable): one task per
session, its first substantive request, scored by a rubric only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from skillopt_ray.sleep.harvest.digest import SessionDigest
from skillopt_ray.sleep.harvest.recipe import proposed
from skillopt_ray.sleep.harvest.tasks import GENERIC_RUBRIC, MinedTask, generalise

MIN_CHARS = 8  # the reference's floor for a substantive request
# tools that change files or run commands: a session that used them was agent work
AGENT_TOOLS = {
    "shell", "exec_command", "apply_patch", "local_shell_call", "write_stdin", "shell_command", "container.exec",
    "Bash", "Edit", "Write", "MultiEdit", "NotebookEdit",
}  # fmt: skip
_SLASH = re.compile(r"^/\S+(?:\s+\S+){0,2}\s*$")


def first_request(d: SessionDigest) -> Optional[str]:
    """The first request that is not a short slash command and has some substance."""
    for r in d.requests:
        text = r.strip()
        if len(text) >= MIN_CHARS and not _SLASH.match(text):
            return text
    return None


def kind_of(d: SessionDigest) -> str:
    return "agent" if AGENT_TOOLS & set(d.tools) else "chat"


def skill_hint(d: SessionDigest) -> str:
    """The one skill the session used; none when it used several or none."""
    return d.skills[0] if len(d.skills) == 1 else ""


def mine(d: SessionDigest, project: Path) -> list[MinedTask]:
    """One task from the session's first substantive request (an agent task's workspace from its commit)."""
    req = first_request(d)
    if req is None:
        return []
    prompt = generalise(req, str(project))
    if len(prompt) < MIN_CHARS:
        return []
    kind = kind_of(d)
    return [
        MinedTask(
            prompt=prompt,
            kind=kind,
            rubric=GENERIC_RUBRIC,
            outcome=d.outcome,
            sessions=[{"source": d.source, "id": d.session_id}],
            skill_hint=skill_hint(d),
            workspace=proposed(d.git_commit) if kind == "agent" else {"kind": "empty"},
            miner="heuristic",
        )
    ]
