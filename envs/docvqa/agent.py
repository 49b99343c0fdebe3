"""DocVQA in an agent harness (llm.target.harness=codex|claude_code), as the reference runs its exec targets.

Each turn is one agent run in a fresh workspace: SKILL.md under .agents/skills/skillopt-target, task.md (the
question, a section about the page image and, from turn 2 on, the previous attempt) and the page image copied to
attachments/01_<name> and listed in ATTACHMENTS.md (Codex also gets it with -i). The final message (the raw
transcript when it is empty) is scored as a chat reply; a reply without <answer> tags is asked again while turns
remain. The analysts see SKILL.md and task.md as the target prompts, and the agent's trace summary.
"""

from __future__ import annotations

import os
from typing import Any

from skillopt_envs.base import LLM, EpisodeContext, EpisodeResult, Task
from skillopt_envs.docvqa import prompts
from skillopt_envs.docvqa.scoring import has_answer_tag, scored_episode

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
    task: Task, skill: str, llm: LLM, ctx: EpisodeContext, agent: dict[str, Any], image: str, timeout_s: float
) -> EpisodeResult:
    """One DocVQA item played by the agent CLI, one run per turn (env.max_turns, 1 by default)."""
    from skillopt_ray.harness.episode import HarnessTask, run_harness_task, trace_to_optimizer, turns_info

    p = task.payload
    question, answers = p["question"], list(p["answers"])
    outcomes: list[Any] = []
    replies: list[str] = []
    md = skill_md = ""
    for turn in range(max(1, ctx.max_turns)):
        md = task_md(question, image, replies[-1] if replies else "")
        ht = HarnessTask(DESCRIPTION, PREAMBLE, md, PROMPT, timeout_s, images=[image])
        key = f"{ctx.key}/{task.task_id}" + (f"/t{turn}" if turn else "")
        out = await run_harness_task(llm, agent, task.task_id, skill, ht, key)
        outcomes.append(out)
        skill_md = out.skill_md
        if out.run is None:
            info = {"target_system_prompt": skill_md, "target_user_prompt": md, **turns_info(outcomes)}
            return EpisodeResult(
                task.task_id, task.task_type, fail_reason="infra_error", infra_error=True, error_kind=out.error_kind,
                error=out.error, n_turns=len(replies) + 1, task_description=question, info=info,
            )  # fmt: skip
        replies.append(out.run.response)
        if has_answer_tag(replies[-1]):
            break
    name = os.path.basename(image)
    # the reference's exec path records the bare question here (no answer-format sentence)
    shown = f"{question}\n\n[image] {name}"
    trace = turns_info(outcomes, trace_to_optimizer(agent))
    return scored_episode(task, question, answers, replies, shown, skill_md, md, name, "image", **trace)
