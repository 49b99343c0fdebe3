"""OfficeQA in an agent harness (llm.target.harness=codex|claude_code): the reference's exec loop, offline with local
tools only. Each call is one agent run in a rebuilt workspace whose docs/root_<k> link (read-only) to the corpus
roots; task.md is the user message with a corpus note, the candidate files as workspace paths (first 20), the oracle
pages and the source hints, and from call 2 on the previous attempt. The agent searches the corpus with its own
tools. The loop stops at the first response holding <answer> (the first tag is the answer), else after max_turns
calls with `Exceeded codex turn budget (<n>)`. Each call has 180 s (the reference's fixed limit).
"""

from __future__ import annotations

from pathlib import Path

from skillopt_envs.base import AgentOutcome, AgentRunner, AgentTask, EpisodeContext, EpisodeResult, Task
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import agent_turns_info, run_agent_turns, with_previous_attempt
from skillopt_envs.officeqa import prompts
from skillopt_envs.officeqa.scoring import extract_answer, has_answer_tag, score

DESCRIPTION = "Answer the OfficeQA question in task.md from the Treasury Bulletin corpus under docs/"
PREAMBLE = (
    "Inspect the provided excerpts and the corpus files under docs/ before answering.\n"
    "Ground every value of the answer in text you have read.\n"
    "Give the final answer inside <answer></answer> tags."
)
PROMPT = (
    "Use the `skillopt-target` skill in this workspace.\n"
    "Read task.md, then inspect and search the document corpus under docs/.\n"
    "The candidate files in task.md are hints, not limits on what you may read.\n"
    "Give your final answer inside <answer></answer> tags."
)
CORPUS_NOTE = (
    "The whole corpus of parsed bulletins is under `docs/` in this workspace (one folder per corpus root). The "
    "candidate files below are only hints about where the answer may be."
)
CALL_TIMEOUT_S = 180.0  # the reference's fixed limit of one exec call
BUDGET_FAIL = "Exceeded codex turn budget ({n})"


def workspace_links(roots: list[Path]) -> dict[str, str]:
    """docs/root_1, docs/root_2, ... linked to the corpus roots, in root order."""
    return {f"docs/root_{k}": str(r) for k, r in enumerate(roots, start=1)}


def relative_candidates(candidates: list[Path], roots: list[Path]) -> list[str]:
    """The candidate files as the agent sees them: docs/root_<k>/<path inside that root>."""
    out = []
    for c in candidates:
        for k, root in enumerate(roots, start=1):
            if c == root or root in c.parents:
                out.append(f"docs/root_{k}/{c.relative_to(root).as_posix()}")
                break
    return out


# the request after a reply without a final answer (task.md from the second call on)
RECHECK = "That attempt gave no final answer. Check the documents again and answer inside <answer></answer> tags."


async def agent_episode(
    task: Task,
    skill: str,
    agent: AgentRunner,
    ctx: EpisodeContext,
    roots: list[Path],
    candidates: list[Path],
    oracle: str,
    extra: JSONObject,
) -> EpisodeResult:
    """Run the exec loop and score it as the chat loop's outcome is (normalised EM and token F1 of the first tag's
    text); `extra` is the benchmark's own info (source files, oracle pages). An agent that could not run is an
    infra error, never a score."""
    p = task.payload
    question, docs, files = p["question"], list(p["source_docs"]), list(p["source_files"])
    # the analysts' first entry is the chat path's user message: absolute candidate paths, no corpus note
    conversation: list[JSONObject] = [
        {"role": "user", "content": prompts.user_prompt(question, oracle, [str(c) for c in candidates], docs, files)}
    ]
    base = prompts.user_prompt(
        question, oracle, relative_candidates(candidates, roots), docs, files, corpus_note=CORPUS_NOTE
    )
    links = workspace_links(roots)

    def make(previous: str) -> AgentTask:
        md = with_previous_attempt(base, previous, RECHECK)
        return AgentTask(
            skill, DESCRIPTION, PREAMBLE, md, PROMPT, CALL_TIMEOUT_S, task_id=task.task_id, link_dirs=links
        )

    n = max(1, ctx.max_turns)
    turns = await run_agent_turns(agent, f"{ctx.key}/{task.task_id}", n, make, has_answer_tag)
    conversation += [{"type": "message", "turn": k, "content": r} for k, r in enumerate(turns.replies, 1)]
    prompts_info = {**extra, "target_system_prompt": turns.skill_md, "target_user_prompt": turns.task_md}
    out = turns.failed
    if out is not None:
        return _infra_result(task, out, conversation, turns.outcomes, prompts_info)
    response = turns.replies[-1]
    final = extract_answer(response) if has_answer_tag(response) else ""
    fail = "" if has_answer_tag(response) else BUDGET_FAIL.format(n=n)
    return _scored_result(task, final, fail, response, conversation, turns.outcomes, agent, prompts_info)


def _infra_result(
    task: Task,
    out: AgentOutcome,
    conversation: list[JSONObject],
    outcomes: list[AgentOutcome],
    prompts_info: JSONObject,
) -> EpisodeResult:
    """The agent could not run (`out` is the failed call's outcome): an infra error row, never a score."""
    info = {**prompts_info, **agent_turns_info(outcomes)}
    return EpisodeResult(
        task.task_id, task.task_type, fail_reason="infra_error", infra_error=True, error_kind=out.error_kind,
        error=out.error, n_turns=len(conversation), trajectory=conversation, task_description=task.payload["question"],
        info={**info, "predicted_answer": "", "agent_ok": False},
    )  # fmt: skip


def _scored_result(
    task: Task,
    final: str,
    fail: str,
    response: str,
    conversation: list[JSONObject],
    outcomes: list[AgentOutcome],
    agent: AgentRunner,
    prompts_info: JSONObject,
) -> EpisodeResult:
    """The loop's answer (or its failure) scored against the ground truth, with each call's usage."""
    s = score(final, task.payload["ground_truth"], fail)
    return EpisodeResult(
        task.task_id,
        task.task_type,
        hard=float(s.hard),
        soft=s.soft,
        fail_reason=s.fail_reason,
        n_turns=len(conversation),
        trajectory=conversation,
        task_description=task.payload["question"],
        info={
            **prompts_info,
            "response": response,
            "predicted_answer": s.predicted,
            "agent_ok": s.agent_ok,
            **agent_turns_info(outcomes, agent.trace_to_optimizer),
        },
    )
