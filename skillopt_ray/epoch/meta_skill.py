"""Meta skill: optimizer-facing memory written at an epoch boundary, injected into the next epoch's prompts."""

from __future__ import annotations

from typing import Any

from skillopt_ray import prompts
from skillopt_ray.llm.types import ChatRequest


async def write_meta_skill(llm: Any, meta_skill: str, epoch_history: list[dict[str, Any]], key: str) -> str:
    res = await llm.chat_json(ChatRequest("optimizer", "meta_skill", prompts.meta_skill_messages(meta_skill, epoch_history), key),
                              prompts.META_SKILL_SCHEMA, "meta_skill")
    return str(res.data["meta_skill"]).strip()
