"""LiveMathematicianBench in an agent harness (llm.target.harness=codex|claude_code), as the reference runs its exec
targets: each turn is one agent run whose task.md is the chat target's user message (the shuffled choices), with the
previous attempt appended from turn 2 on; SKILL.md carries the skill. The final message (the raw transcript when it
is empty) is scored as a chat reply, and the analysts see SKILL.md and task.md as the target prompts.
"""

from __future__ import annotations

from skillopt_envs.base import AgentRunner, AgentTask, EpisodeContext, EpisodeResult, Task
from skillopt_envs.kit import agent_failure, agent_turns_info, run_agent_turns, with_previous_attempt
from skillopt_envs.livemathematicianbench.data import Choice
from skillopt_envs.livemathematicianbench.scoring import has_answer_tag, scored_episode

DESCRIPTION = "Pick the single correct option of the research-mathematics multiple-choice question in task.md"
PREAMBLE = (
    "Use this skill for the current multiple-choice question.\n"
    "Inspect the exact wording of every option, then output only the chosen label inside <answer></answer> tags."
)
PROMPT = (
    "Use the `skillopt-target` skill in this workspace.\n"
    "Read task.md and solve the question in it.\n"
    "Output only the label of your choice inside <answer></answer> tags."
)


# what an agent turn after a reply without an answer is asked (after the task and that reply)
RECHECK = "Check the exact wording of each option once more and give only the label inside <answer></answer> tags."


async def agent_episode(
    task: Task,
    skill: str,
    agent: AgentRunner,
    ctx: EpisodeContext,
    user: str,
    choices: list[Choice],
    correct: Choice,
    timeout_s: float,
) -> EpisodeResult:
    """One item played by the agent CLI, one run per turn (env.max_turns, 1 by default); timeout_s <= 0: no limit."""

    def make(previous: str) -> AgentTask:
        return AgentTask(
            skill,
            DESCRIPTION,
            PREAMBLE,
            with_previous_attempt(user, previous, RECHECK),
            PROMPT,
            timeout_s,
            task_id=task.task_id,
        )

    turns = await run_agent_turns(agent, f"{ctx.key}/{task.task_id}", ctx.max_turns, make, has_answer_tag)
    skill_md, md = turns.skill_md, turns.task_md
    if turns.failed is not None:
        return agent_failure(task, turns, "")
    trace = agent_turns_info(turns.outcomes, agent.trace_to_optimizer)
    return scored_episode(task, skill_md, md, choices, correct, turns.replies, **trace)
