"""Stage 5 — update: build the candidate skill from the selected items (edits or a rewrite).

patch: the edits applied in order with a per-edit report. rewrite_from_suggestions: one call rewrites
the whole document from the selected suggestions. full_rewrite_minibatch: the first merged candidate.
In the rewrite modes the protected regions are re-attached verbatim unless
`optimizer.protect_regions_in_rewrites=false` (the reference relies on the prompt alone:
quirk: rewrite-protection-by-prompt). With `optimizer.refuse_echoed_rewrites` a rewrite that copies the prompt's
own headings or a `[...]` placeholder is refused (`skipped_echoed_prompt`), so the step keeps its skill and spends
no gate on it; off by default, as the reference gates any non-blank rewrite.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from skillopt_envs.chat import ChatRequest
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray import prompts
from skillopt_ray.llm.types import MalformedOutput
from skillopt_ray.runs.payload import Item
from skillopt_ray.skill.document import keep_protected_regions
from skillopt_ray.skill.echo import prompt_echo
from skillopt_ray.skill.edits import EditReport, apply_edits


@dataclass
class UpdateOutput:
    """update.json: the candidate skill (None: none this step), the per-edit reports and the rewrite's summary."""

    candidate: Optional[str]  # None: no usable rewrite (action skip_no_rewrite)
    reports: list[EditReport] = field(default_factory=list)
    summary: dict[str, int] = field(default_factory=dict)
    change_summary: list[str] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @staticmethod
    def from_dict(d: Any) -> UpdateOutput:
        """update.json as read back (the memo's JSON)."""
        return UpdateOutput(**d)


ECHOED = "skipped_echoed_prompt"  # a rewrite refused as a copy of the prompt (optimizer.refuse_echoed_rewrites)


def _finish(original: str, new_skill: str, protect: bool) -> str:
    text = new_skill.rstrip() + "\n"
    return keep_protected_regions(original, text) if protect else text


def _refusal(new_skill: str, skill: str, what: str) -> Optional[EditReport]:
    """The report row of a rewrite refused as an echo of the prompt, or None when it reads as a skill."""
    why = prompt_echo(new_skill, skill)
    return EditReport(op=what, status=ECHOED, reason=why) if why else None


def _refused(reports: list[EditReport], note: str) -> UpdateOutput:
    """No candidate this step: every rewrite was refused; the reports say why."""
    summary = {"total": len(reports), "applied": 0, "skipped": len(reports), "errors": 0}
    return UpdateOutput(None, reports, summary, note=f"{note}: {reports[-1]['reason']}")


def _full_rewrite(skill: str, items: list[Item], protect_regions: bool, refuse_echoes: bool) -> UpdateOutput:
    """The first merged candidate with a new skill (with refuse_echoes: the first that is not a prompt echo)."""
    refused: list[EditReport] = []
    for it in items:
        if not (isinstance(it, dict) and str(it.get("new_skill") or "").strip()):
            continue
        row = _refusal(str(it["new_skill"]), skill, "full_rewrite") if refuse_echoes else None
        if row is not None:
            refused.append(row)
            continue
        cs = it.get("change_summary") or []
        return UpdateOutput(
            _finish(skill, str(it["new_skill"]), protect_regions),
            refused,
            change_summary=cs if isinstance(cs, list) else [str(cs)],
            note="full rewrite",
        )
    if refused:
        return _refused(refused, "every full rewrite refused")
    return UpdateOutput(None, note="no merged candidate holds a new skill")


async def update(
    llm: Any,
    skill: str,
    items: list[Item],
    *,
    mode: str,
    step_buffer: str,
    protect_regions: bool,
    key: str,
    refuse_echoes: bool = False,
) -> UpdateOutput:
    if mode == "patch":
        res = apply_edits(skill, items)
        return UpdateOutput(res.text, res.reports, res.summary())
    if mode == "full_rewrite_minibatch":
        return _full_rewrite(skill, items, protect_regions, refuse_echoes)
    if not items:
        return UpdateOutput(None, note="no suggestions")
    user = prompts.rewrite_user(skill=skill, suggestions=items, step_buffer=step_buffer)
    try:
        res = await llm.chat_json(
            ChatRequest(
                "optimizer", "rewrite", prompts.messages(prompts.system_prompt("rewrite_skill"), user), f"{key}/rewrite"
            ),
            prompts.REWRITE_SCHEMA,
            "rewrite",
        )
    except MalformedOutput as e:
        return UpdateOutput(None, note=f"rewrite unusable: {e.message}")
    new = str(res.data.get("new_skill") or "")
    if not new.strip():
        return UpdateOutput(None, note="the rewrite returned an empty skill")
    row = _refusal(new, skill, "rewrite") if refuse_echoes else None
    if row is not None:
        return _refused([row], "rewrite refused")
    cs = res.data.get("change_summary") or []
    return UpdateOutput(
        _finish(skill, new, protect_regions), change_summary=cs if isinstance(cs, list) else [str(cs)], note="rewrite"
    )
