"""docs/your-own-tasks.md says what its commands do: the quick command comes first with its time, the worked
example's smoke run is described as it ends (its test task is gcd, which the tiny model fails), and an agent task's
check is told what the harness leaves in the workspace beside the task's files."""

from __future__ import annotations

import re
from pathlib import Path

from skillopt_ray.harness.commands import CODEX_LAST_MESSAGE
from skillopt_ray.harness.skill_md import SKILL_PATH

DOC = (Path(__file__).resolve().parents[2] / "docs" / "your-own-tasks.md").read_text(encoding="utf-8")


def test_the_first_command_is_the_quick_one_and_each_says_how_long_it_takes():
    first = re.findall(r"```bash\n(.*?)```", DOC, re.S)[0]
    assert "+smoke=tiny" in first and "llm=" not in first
    after = DOC.split("```", 2)[2].split("`env.data_dir` is one of", 1)[0]
    assert re.search(r"\d+ min \d+ s", after) and "20-35 minutes" in after and "full protocol" in after


def test_the_smoke_run_of_the_worked_example_is_described_as_it_ends():
    example = DOC.split("## The worked example", 1)[1].split("## Agent tasks", 1)[0]
    assert "`mean` function" not in example and "passed the hidden tests" not in example
    assert "`gcd`" in example and "fails it" in example


def test_the_check_of_an_agent_task_is_told_what_else_the_workspace_holds():
    agent = DOC.split("## Agent tasks", 1)[1].split("## Your own Python benchmark", 1)[0]
    assert SKILL_PATH in agent and CODEX_LAST_MESSAGE in agent and "`task.md`" in agent
