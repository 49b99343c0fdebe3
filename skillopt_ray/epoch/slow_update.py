"""Slow update (at each epoch boundary, as the reference does it): the previous epoch's skill and the
current one play the same train sample; the pairs, with both trajectories, go to one optimizer call that
writes target-facing guidance into the protected block at the end of the skill."""

from __future__ import annotations

import random
from typing import Any, Optional

from skillopt_envs.base import EpisodeResult, Task
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray import prompts
from skillopt_ray.epoch import ask_for_text
from skillopt_ray.prompts.render import EpochPair, PairSide, conversation_text

CATEGORIES = {
    (False, True): "improved",
    (True, False): "regressed",
    (False, False): "persistent_fail",
    (True, True): "stable_success",
}
POLICY = {
    "mixed": set(CATEGORIES.values()),
    "changed": {"improved", "regressed"},
    "unchanged": {"persistent_fail", "stable_success"},
}


def sample_tasks(train: list[Task], seed: int, epoch: int, n: int) -> list[Task]:
    """The train split shuffled with Random(seed + 2000·epoch); the first n (the `changed` top-up walks on)."""
    order = list(train)
    random.Random(seed + 2000 * epoch).shuffle(order)
    return order[:n] if n else order


def _task_text(task: Task, r: Optional[EpisodeResult]) -> str:
    p = task.payload
    return str(p.get("question") or (r.task_description if r else "") or p.get("instruction") or task.task_id)


def _side(r: Optional[EpisodeResult]) -> PairSide:
    if r is None:
        return {"hard": 0, "soft": 0.0, "predicted_answer": "N/A", "fail_reason": "no result"}
    return {
        "hard": r.hard,
        "soft": r.soft,
        "predicted_answer": r.info.get("predicted_answer") or "N/A",
        "fail_reason": r.fail_reason,
    }


def _trajectory(r: Optional[EpisodeResult]) -> str:
    if r is None:
        return "(trajectory not available)"
    return conversation_text(r.trajectory) or "(empty trajectory)"


def build_pairs(tasks: list[Task], prev: list[EpisodeResult], curr: list[EpisodeResult]) -> list[EpochPair]:
    """One pair per task, matched by id. A task that could not be scored on either side (infra or data
    error) is left out rather than counted as a failure."""
    by_prev = {r.task_id: r for r in prev}
    by_curr = {r.task_id: r for r in curr}
    pairs: list[EpochPair] = []
    for t in tasks:
        p, c = by_prev.get(t.task_id), by_curr.get(t.task_id)
        if any(r is not None and not r.scored for r in (p, c)):
            continue
        cat = CATEGORIES[(bool(p and p.hard), bool(c and c.hard))]
        pairs.append(
            {
                "id": t.task_id,
                "task": _task_text(t, c or p),
                "category": cat,
                "prev": _side(p),
                "curr": _side(c),
                "prev_trajectory": _trajectory(p),
                "curr_trajectory": _trajectory(c),
            }
        )
    return pairs


def keep(pairs: list[EpochPair], policy: str) -> list[EpochPair]:
    return [p for p in pairs if p["category"] in POLICY[policy]]


async def write_slow_update(llm: Any, user: str, key: str) -> tuple[JSONObject, Optional[str]]:
    """One call on the user message of `prompts.slow_update_user`. Returns (record, guidance); guidance
    None when the reply had no usable content (action no_content)."""
    return await ask_for_text(llm, "slow_update", user, prompts.SLOW_UPDATE_SCHEMA, "slow_update_content", key)
