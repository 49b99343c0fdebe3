"""DocVQA in an agent harness (llm.target.harness=codex|claude_code), as the reference runs its exec targets.

Each turn is one agent run in a fresh workspace: SKILL.md under .agents/skills/skillopt-target, task.md (the
question, a section about the page image and, from turn 2 on, the previous attempt) and the page image copied to
attachments/01_<name> and listed in ATTACHMENTS.md (Codex also gets it with -i). The final message (the raw
transcript when it is empty) is scored as a chat reply; a reply without <answer> tags is asked again while turns
remain. The analysts see SKILL.md and task.md as the target prompts, and the agent's trace summary.
"""

from __future__ import annotations

import os

from skillopt_envs.base import AgentRunner, AgentTask, EpisodeContext, EpisodeResult, Task
from skillopt_envs.docvqa import prompts
from skillopt_envs.docvqa.scoring import has_answer_tag, scored_episode
from skillopt_envs.kit import agent_failure, agent_turns_info, run_agent_turns

DESCRIPTION = "Answer the DocVQA question in task.md from the attached document image"
PREAMBLE = (
    "Use this skill for the current DocVQA question.\n"
    "Inspect the attached page image and give the answer inside <answer></answer> tags."
)
PROMPT = (
    "Use the `skillopt-target` skill in this workspace.\n"
    "Read task.md, inspect the attached document image, and answer the question.\n"
    "Give your final answer inside <answer></answer> tags."
)


def task_md(question: str, image_path: str, previous: str = "") -> str:
    """task.md: the chat target's user text, the page-image section, and (turn 2 on) the previous attempt."""
    parts = [
        prompts.user_text(question),
        "## Document Image\n"
        "The document page for this question is listed in `ATTACHMENTS.md`. "
        f"Its original absolute path is `{os.path.abspath(image_path)}`. "
        "Open and inspect the image itself; do not answer from memory.",
    ]
    if previous:
        parts.append(
            "## Previous Attempt\n"
            f"{previous}\n\n"
            "That attempt gave no answer inside <answer></answer> tags. Look at the image again and answer."
        )
    return "\n\n".join(parts)


async def agent_episode(
    task: Task, skill: str, agent: AgentRunner, ctx: EpisodeContext, image: str, timeout_s: float
) -> EpisodeResult:
    """One DocVQA item played by the agent CLI, one run per turn (env.max_turns, 1 by default)."""
    p = task.payload
    question, answers = p["question"], list(p["answers"])

    def make(previous: str) -> AgentTask:
        md = task_md(question, image, previous)
        return AgentTask(skill, DESCRIPTION, PREAMBLE, md, PROMPT, timeout_s, task_id=task.task_id, images=[image])

    turns = await run_agent_turns(agent, f"{ctx.key}/{task.task_id}", ctx.max_turns, make, has_answer_tag)
    skill_md, md = turns.skill_md, turns.task_md
    if turns.failed is not None:
        return agent_failure(task, turns, question)
    name = os.path.basename(image)
    # the reference's exec path records the bare question here (no answer-format sentence)
    shown = f"{question}\n\n[image] {name}"
    trace = agent_turns_info(turns.outcomes, agent.trace_to_optimizer)
    return scored_episode(task, question, answers, turns.replies, shown, skill_md, md, name, "image", **trace)
