"""Skill-aware reflection's appendix, as the reference keeps it: execution-lapse notes go into a protected
block of the post-gate current skill, deduplicated, ungated; one call compacts them once they pass
`optimizer.skill_aware_consolidate_threshold` (0 = never). A failed consolidation keeps every note."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from skillopt_envs.chat import ChatRequest
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray import prompts
from skillopt_ray.llm.types import MalformedOutput
from skillopt_ray.skill.document import append_to_appendix_field, appendix_notes, set_appendix_notes


@dataclass
class FlushResult:
    """appendix_notes.json: the skill after the step's notes went in, and how many were added or kept."""

    skill: str
    added: int = 0
    total: int = 0
    consolidated: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @staticmethod
    def from_dict(d: Any) -> FlushResult:
        """appendix_notes.json as read back (the memo's JSON)."""
        return FlushResult(**d)


async def flush_notes(llm: Any, skill: str, notes: list[str], threshold: int, key: str) -> FlushResult:
    before = len(appendix_notes(skill))
    text = append_to_appendix_field(skill, notes) if notes else skill
    merged = appendix_notes(text)
    res = FlushResult(text, added=len(merged) - before, total=len(merged), notes=list(notes))
    if threshold > 0 and len(merged) > threshold:
        try:
            out = await llm.chat_json(
                ChatRequest(
                    "optimizer",
                    "appendix_consolidate",
                    prompts.messages(prompts.system_prompt("appendix_consolidate"), prompts.consolidate_user(merged)),
                    f"{key}/consolidate",
                ),
                prompts.CONSOLIDATE_SCHEMA,
                "appendix",
            )
            shorter = [n.strip() for n in out.data["appendix_notes"] if isinstance(n, str) and n.strip()]
        except MalformedOutput:
            shorter = []
        if shorter and len(shorter) < len(merged):  # only a strictly shorter list replaces the notes
            res.skill, res.total, res.consolidated = set_appendix_notes(text, shorter), len(shorter), True
    return res
