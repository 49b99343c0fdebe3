"""A mined task: the request, its kind, how it is scored, and where it came from."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict, Union

from skillopt_ray.sleep.harvest.splits import task_id

KINDS = ("chat", "agent")
OUTCOMES = ("satisfied", "corrected", "unknown")
TEXT_OPS = ("contains", "not_contains", "regex", "section_present")
OPS = (*TEXT_OPS, "max_chars", "tool_called", "command_succeeds")
MAX_ARG = 300
MAX_PROMPT = 4000
MAX_RUBRIC = 300
GENERIC_RUBRIC = "The response does what task.md asks, completely and correctly, and nothing the task did not ask for."
_ABS_PATH = re.compile(r"(?<![\w.])(?:~|/[\w.\-]+)(?:/[\w.\-@+]+)+/?")


class RuleCheck(TypedDict):
    """One rule check the task's check program runs: `op` one of OPS, `arg` its text (or a count for max_chars)."""

    op: str
    arg: Union[str, int]


class TaskMetadata(TypedDict):
    """`metadata` in a mined task's task.json: what the scorer reads (checks, rubric) and where the task came from."""

    kind: str
    checks: list[RuleCheck]
    rubric: str
    outcome: str
    source_sessions: list[dict[str, str]]
    skill_hint: str
    workspace: dict[str, str]
    miner: str
    task_type: str
    check_review: list[Any]  # each mined check's verdict on its session's evidence (verify.py)


@dataclass
class MinedTask:
    """One task as the harvest writes it. `checks` are rule checks ({op, arg}); `rubric` one sentence for the
    optimizer to judge by (part 2). Neither is ever shown to the target."""

    prompt: str
    kind: str
    checks: list[RuleCheck] = field(default_factory=list)
    rubric: str = ""
    outcome: str = "unknown"
    sessions: list[dict[str, str]] = field(default_factory=list)  # [{source, id}] as the CLIs give them
    skill_hint: str = ""
    workspace: dict[str, str] = field(default_factory=lambda: {"kind": "empty"})
    miner: str = "heuristic"
    evidence: Any = None  # verify.Evidence: the session's accepted and corrected outcomes (never written)
    check_review: list[Any] = field(default_factory=list)

    @property
    def id(self) -> str:
        return task_id(self.prompt)

    def metadata(self) -> TaskMetadata:
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
            "check_review": self.check_review,
        }


def generalise(prompt: str, project: str) -> str:
    """The request without the machine's absolute paths: the project's own become relative, others `<path>`."""
    root = os.path.realpath(project).rstrip("/")

    def sub(m: re.Match[str]) -> str:
        p = m.group(0)
        if p == root or p.startswith(root + "/"):
            return p[len(root) + 1 :] or "."
        return "<path>"

    return _ABS_PATH.sub(sub, prompt).strip()  # cut to MAX_PROMPT after redaction (pipeline.redact_task)


def valid_check(raw: Any) -> Optional[RuleCheck]:
    """The check as {op, arg} when it is one the check program runs with a usable argument, else None."""
    if not isinstance(raw, dict) or raw.get("op") not in OPS:
        return None
    op, arg = raw["op"], raw.get("arg")
    if op == "max_chars":
        if not isinstance(arg, int) or isinstance(arg, bool) or not 0 < arg <= 100_000:
            return None
        count: RuleCheck = {"op": op, "arg": arg}
        return count
    if not isinstance(arg, str) or not arg.strip() or len(arg) > MAX_ARG:
        return None
    if op == "regex":
        try:
            re.compile(arg)
        except re.error:
            return None
    check: RuleCheck = {"op": op, "arg": arg.strip()}
    return check
