"""Slow update: compare the previous epoch's skill and the current one on the same train tasks,
and write target-facing guidance into the protected slow-update block."""

from __future__ import annotations

from typing import Any

from envs.base import EpisodeResult
from skillopt_ray import prompts
from skillopt_ray.llm.types import ChatRequest
from skillopt_ray.skill.document import SLOW_UPDATE, set_region

CATEGORIES = ("improved", "regressed", "persistent_fail", "stable_success")
POLICY = {
    "mixed": CATEGORIES,
    "changed": ("improved", "regressed"),
    "unchanged": ("persistent_fail", "stable_success"),
}


def classify_pair(prev: EpisodeResult, cur: EpisodeResult) -> str:
    if not prev.success and cur.success:
        return "improved"
    if prev.success and not cur.success:
        return "regressed"
    if not prev.success and not cur.success:
        return "persistent_fail"
    return "stable_success"


def pair_categories(prev: list[EpisodeResult], cur: list[EpisodeResult], policy: str) -> dict[str, list[str]]:
    """Task descriptions grouped by category, restricted to the categories the policy keeps.
    Pairs with an infrastructure failure on either side are left out."""
    keep = POLICY[policy]
    out: dict[str, list[str]] = {c: [] for c in keep}
    for p, c in zip(prev, cur):
        if p.task_id != c.task_id:
            raise ValueError("slow-update pairs are misaligned")
        if p.infra_error or c.infra_error:
            continue
        cat = classify_pair(p, c)
        if cat in out:
            reason = f" (now: {c.fail_reason})" if c.fail_reason else ""
            out[cat].append(f"- {c.task_id} [{c.task_type}]{reason}")
    return out


async def write_slow_update(llm: Any, skill: str, pairs: dict[str, list[str]], key: str) -> tuple[str, str]:
    """Returns (candidate skill with the new block, guidance text)."""
    res = await llm.chat_json(ChatRequest("optimizer", "slow_update", prompts.slow_update_messages(skill, pairs), key),
                              prompts.SLOW_UPDATE_SCHEMA, "slow_update")
    guidance = str(res.data["guidance"]).strip()
    return set_region(skill, SLOW_UPDATE, "## Lessons across epochs\n" + guidance), guidance
