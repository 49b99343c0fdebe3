"""Stage 5 — update: build the candidate skill. Protected regions survive every mode unchanged."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from skillopt_ray import prompts
from skillopt_ray.llm.types import ChatRequest, MalformedOutput
from skillopt_ray.skill.document import APPENDIX, region_content, replace_body, set_region
from skillopt_ray.skill.edits import Edit, apply_edits


@dataclass
class UpdateOutput:
    candidate: str
    reports: list[dict[str, Any]] = field(default_factory=list)
    n_applied: int = 0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "UpdateOutput":
        return UpdateOutput(**d)


def _appendix_notes(skill: str) -> list[str]:
    return [ln[2:].strip() for ln in region_content(skill, APPENDIX).splitlines() if ln.startswith("- ")]


async def add_lapse_notes(llm: Any, skill: str, lapses: list[str], max_notes: int, key: str) -> str:
    """Skill-aware reflection: execution-lapse notes go to the protected appendix, deduplicated,
    consolidated by one call once past the threshold."""
    notes = _appendix_notes(skill)
    for n in lapses:
        n = " ".join(n.split())
        if n and n.lower() not in {x.lower() for x in notes}:
            notes.append(n)
    if len(notes) > max_notes:
        try:
            res = await llm.chat_json(ChatRequest("optimizer", "appendix_consolidate", prompts.consolidate_messages(notes, max_notes), f"{key}/consolidate"),
                                      prompts.NOTES_SCHEMA, "notes")
            notes = [str(x) for x in res.data["notes"]][:max_notes]
        except MalformedOutput:
            notes = notes[-max_notes:]
    if not notes:
        return skill
    return set_region(skill, APPENDIX, "## Execution notes\n" + "\n".join(f"- {n}" for n in notes))


async def update(llm: Any, skill: str, *, mode: str, edits: list[Edit], suggestions: list[str], candidate: str, key: str) -> UpdateOutput:
    if mode == "patch":
        res = apply_edits(skill, edits)
        return UpdateOutput(res.text, [asdict(r) for r in res.reports], res.n_applied)
    if mode == "rewrite_from_suggestions":
        if not suggestions:
            return UpdateOutput(skill, note="no suggestions")
        try:
            out = await llm.chat_json(ChatRequest("optimizer", "rewrite", prompts.rewrite_messages(skill, suggestions), f"{key}/rewrite"),
                                      prompts.REWRITE_SCHEMA, "skill")
        except MalformedOutput as e:
            return UpdateOutput(skill, note=f"rewrite dropped: {e.message}")
        new = replace_body(skill, out.data["skill"])
        return UpdateOutput(new, n_applied=int(new != skill), note="rewrite")
    # full_rewrite_minibatch
    if not candidate.strip():
        return UpdateOutput(skill, note="no candidate")
    new = replace_body(skill, candidate)
    return UpdateOutput(new, n_applied=int(new != skill), note="full rewrite")
