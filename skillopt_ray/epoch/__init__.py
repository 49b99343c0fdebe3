"""Epoch-boundary updates: the slow update (target-facing) and the meta skill (optimizer-facing)."""

from __future__ import annotations

from typing import Any, Optional

from skillopt_envs.chat import ChatRequest

from skillopt_ray import prompts
from skillopt_ray.llm.types import MalformedOutput


async def ask_for_text(
    llm: Any, stage: str, user: str, schema: dict[str, Any], field: str, key: str
) -> tuple[dict[str, Any], Optional[str]]:
    """One optimizer call (system prompt named after the stage) whose reply carries one text field.

    Returns (record, text); text is None when the reply was unusable or the field empty, and the record
    then says action no_content."""
    try:
        res = await llm.chat_json(
            ChatRequest("optimizer", stage, prompts.messages(prompts.system_prompt(stage), user), key), schema, stage
        )
    except MalformedOutput as e:
        return {"action": "no_content", "error": e.message}, None
    text = str(res.data.get(field) or "").strip()
    rec = {"reasoning": str(res.data.get("reasoning") or "").strip(), field: text}
    if not text:
        return {**rec, "action": "no_content"}, None
    return rec, text
