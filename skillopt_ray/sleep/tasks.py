"""A mined task: the request, its kind, how it is scored, and where it came from."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from skillopt_ray.sleep.splits import task_id

KINDS = ("chat", "agent")
OUTCOMES = ("satisfied", "corrected", "unknown")
TEXT_OPS = ("contains", "not_contains", "regex", "section_present")
OPS = (*TEXT_OPS, "max_chars", "tool_called", "command_succeeds")
MAX_ARG = 300
MAX_PROMPT = 4000
GENERIC_RUBRIC = "The response does what task.md asks, completely and correctly, and nothing the task did not ask for."
_ABS_PATH = re.compile(r"(?<![\w.])(?:~|/[\w.\-]+)(?:/[\w.\-@+]+)+/?")


@dataclass
class MinedTask:
    """One task as the harvest writes it. `checks` are rule checks ({op, arg}); `rubric` one sentence for the
    optimizer to judge by (part 2). Neither is ever shown to the target."""

    prompt: str
    kind: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    rubric: str = ""
    outcome: str = "unknown"
    sessions: list[dict[str, str]] = field(default_factory=list)  # [{source, id}] as the CLIs give them
    skill_hint: str = ""
    workspace: dict[str, str] = field(default_factory=lambda: {"kind": "empty"})
    miner: str = "heuristic"

    @property
    def id(self) -> str:
        return task_id(self.prompt)

    def metadata(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "checks": self.checks,
            "rubric": self.rubric,
            "outcome": self.outcome,
            "source_sessions": self.sessions,
            "skill_hint": self.skill_hint,
            "workspace": self.workspace,
            "miner": self.miner,
            "task_type": self.kind,
        }


def generalise(prompt: str, project: str) -> str:
    """The request without the machine's absolute paths: the project's own become relative, others `<path>`."""
    root = os.path.realpath(project).rstrip("/")

    def sub(m: re.Match[str]) -> str:
        p = m.group(0)
        if p == root or p.startswith(root + "/"):
            return p[len(root) + 1 :] or "."
        return "<path>"

    return _ABS_PATH.sub(sub, prompt).strip()[:MAX_PROMPT]


def valid_check(raw: Any) -> Optional[dict[str, Any]]:
    """The check as {op, arg} when it is one the check program runs with a usable argument, else None."""
    if not isinstance(raw, dict) or raw.get("op") not in OPS:
        return None
    op, arg = raw["op"], raw.get("arg")
    if op == "max_chars":
        ok = isinstance(arg, int) and not isinstance(arg, bool) and 0 < arg <= 100_000
        return {"op": op, "arg": arg} if ok else None
    if not isinstance(arg, str) or not arg.strip() or len(arg) > MAX_ARG:
        return None
    if op == "regex":
        try:
            re.compile(arg)
        except re.error:
            return None
    return {"op": op, "arg": arg.strip()}
