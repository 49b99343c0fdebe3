"""SearchQA in an agent harness (llm.target.harness=codex|claude_code): one agent run whose task.md is the chat
target's user message; the final message is scored as a chat reply."""

from __future__ import annotations

from skillopt_envs.base import AgentOutcome, AgentRunner, AgentTask, EpisodeContext, Task

# SKILL.md for an agent target: what the skill is for, and a preamble (the reference's exec pattern)
AGENT_DESCRIPTION = "Answer a question from the search-result passages in task.md"
AGENT_PREAMBLE = (
    "Use this skill for the current SearchQA question.\n"
    "Read the passages in task.md, find the ones that bear on the question, and give a short answer in <answer></answer> tags."
)
AGENT_PROMPT = (
    "Use the `skillopt-target` skill in this workspace.\n"
    "Read task.md and answer its question from the passages.\n"
    "End with your final answer inside <answer></answer> tags."
)
AGENT_TIMEOUT_S = 120.0  # the benchmark's exec_timeout


async def agent_reply(task: Task, skill: str, agent: AgentRunner, ctx: EpisodeContext, user: str) -> AgentOutcome:
    """One agent run on the question; its outcome (an infra failure when the agent could not run) is scored by the
    caller as a chat reply."""
    at = AgentTask(skill, AGENT_DESCRIPTION, AGENT_PREAMBLE, user, AGENT_PROMPT, AGENT_TIMEOUT_S, task_id=task.task_id)
    return await agent.run(at, f"{ctx.key}/{task.task_id}")
