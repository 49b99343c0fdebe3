"""Meta skill (the reference's epoch-boundary memory): optimizer-facing memory written from epoch 2 on, from the same
longitudinal comparison as the slow update, and used in the analyst, merge, ranking and
autonomous-LR prompts of the following epoch."""

from __future__ import annotations

from typing import Any, Optional

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray import prompts
from skillopt_ray.epoch import ask_for_text


async def write_meta_skill(llm: Any, user: str, key: str) -> tuple[JSONObject, Optional[str]]:
    """One call on the user message of `prompts.meta_skill_user`. Returns (record, content); content None
    when the reply had none (the next epoch then runs without a meta skill, as the reference)."""
    rec, content = await ask_for_text(llm, "meta_skill", user, prompts.META_SKILL_SCHEMA, "meta_skill_content", key)
    return (rec if content is None else {**rec, "action": "write_meta_skill"}), content
