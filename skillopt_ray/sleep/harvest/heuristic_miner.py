"""The miner without a model (`--no-model`, and the fallback when the model's reply is unusable): one task per
session, its first substantive request, scored by a rubric and, where the session ran its own tests and they failed
then passed, by that test command (`command_succeeds`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from skillopt_ray.sleep.harvest import guard
from skillopt_ray.sleep.harvest.digest import SessionDigest
from skillopt_ray.sleep.harvest.recipe import proposed
from skillopt_ray.sleep.harvest.tasks import GENERIC_RUBRIC, MAX_ARG, MinedTask, RuleCheck, generalise
from skillopt_ray.sleep.harvest.verify import Evidence

MIN_CHARS = 8  # the reference's floor for a substantive request
# tools that change files or run commands: a session that used them was agent work
AGENT_TOOLS = {
    "shell", "exec_command", "apply_patch", "local_shell_call", "write_stdin", "shell_command", "container.exec",
    "Bash", "Edit", "Write", "MultiEdit", "NotebookEdit",
}  # fmt: skip
_SLASH = re.compile(r"^/\S+(?:\s+\S+){0,2}\s*$")
# a command that runs a project's tests (or its checks): the heuristic's only source of a rule check
_TEST_COMMAND = re.compile(
    r"(?i)(?<![\w-])(?:pytest|py\.test|unittest|tox|nox|(?:npm|pnpm|yarn|bun)(?: run)? test|jest|vitest|mocha"
    r"|cargo test|go test|mvn (?:-\S+ )*test|gradlew? test|ctest|rspec|phpunit|make (?:test|check)|dotnet test"
    r"|mix test|swift test|deno test)(?![\w-])"
)


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


def fixed_test_command(d: SessionDigest) -> Optional[str]:
    """The session's own test command that failed and later passed, its last run passing (the latest such
    command); None when there is none. Redacted text is never a command to run."""
    last: dict[str, bool] = {}
    failed: set[str] = set()
    found = None
    for r in d.runs:
        cmd = " ".join(r["command"].split())
        if not _TEST_COMMAND.search(cmd) or "[REDACTED" in cmd or len(cmd) > MAX_ARG:
            continue
        if not r["ok"]:
            failed.add(cmd)
        elif cmd in failed:
            found = cmd
        last[cmd] = r["ok"]
    return found if found is not None and last[found] else None


def command_checks(d: SessionDigest) -> list[RuleCheck]:
    cmd = fixed_test_command(d)
    return [{"op": "command_succeeds", "arg": cmd}] if cmd else []


def mine(d: SessionDigest, project: Path) -> list[MinedTask]:
    """One task from the session's first substantive request (an agent task's workspace from its commit)."""
    req = first_request(d)
    if req is None:
        return []
    prompt = generalise(req, str(project))
    if len(prompt) < MIN_CHARS:
        return []
    kind = kind_of(d)
    checks = command_checks(d) if kind == "agent" else []
    checks, _refused = guard.clean_checks(checks, guard.suspect_texts(d))
    return [
        MinedTask(
            prompt=prompt,
            kind=kind,
            checks=checks,
            rubric=GENERIC_RUBRIC,
            outcome=d.outcome,
            sessions=[{"source": d.source, "id": d.session_id}],
            skill_hint=skill_hint(d),
            workspace=proposed(d.git_commit) if kind == "agent" else {"kind": "empty"},
            miner="heuristic",
            evidence=Evidence.of(d),
        )
    ]
