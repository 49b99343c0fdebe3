"""Meta skill (REFERENCE_SPEC §11): optimizer-facing memory written from epoch 2 on, from the same
longitudinal comparison as the slow update, and used in the analyst, merge, ranking and
autonomous-LR prompts of the following epoch."""

from __future__ import annotations

from typing import Any, Optional

from skillopt_ray import prompts
from skillopt_ray.llm.types import ChatRequest, MalformedOutput


async def write_meta_skill(llm: Any, user: str, key: str) -> tuple[dict[str, Any], Optional[str]]:
    """One call on the user message of `prompts.meta_skill_user`. Returns (record, content); content None
    when the reply had none (the next epoch then runs without a meta skill, as the reference)."""
    try:
        res = await llm.chat_json(ChatRequest("optimizer", "meta_skill", prompts.messages(prompts.system_prompt("meta_skill"), user), key),
                                  prompts.META_SKILL_SCHEMA, "meta_skill")
    except MalformedOutput as e:
        return {"action": "no_content", "error": e.message}, None
    content = str(res.data.get("meta_skill_content") or "").strip()
    rec = {"reasoning": str(res.data.get("reasoning") or "").strip(), "meta_skill_content": content}
    if not content:
        return {**rec, "action": "no_content"}, None
    return {**rec, "action": "write_meta_skill"}, content
