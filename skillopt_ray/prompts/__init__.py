"""Optimizer prompts: system prompts (Markdown files under system/), the user messages each call
receives in the reference's section order (reflect, aggregate, select, update, epoch boundary), and
the JSON schemas their replies are checked against."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from skillopt_envs.chat import ChatMessage
from skillopt_envs.jsontypes import JSONObject, JSONValue

from skillopt_ray.prompts.render import meta_skill_block
from skillopt_ray.runs.payload import Item, Patch, PayloadKey, items_of

SYSTEM_DIR = Path(__file__).parent / "system"

# update mode -> (payload key, label, title label)
PAYLOAD: dict[str, tuple[PayloadKey, str, str]] = {
    "patch": ("edits", "edits", "Edits"),
    "rewrite_from_suggestions": ("revise_suggestions", "suggestions", "Suggestions"),
    "full_rewrite_minibatch": ("skill_candidates", "skill candidates", "Skill Candidates"),
}
# update mode -> suffix of the mode's prompt files
MODE_SUFFIX = {"patch": "", "rewrite_from_suggestions": "_rewrite", "full_rewrite_minibatch": "_full_rewrite"}


@cache
def system_prompt(name: str, env: str = "") -> str:
    """The benchmark's own version of a prompt if it ships one, else the generic file."""
    candidates = ([SYSTEM_DIR / env / f"{name}.md"] if env else []) + [SYSTEM_DIR / f"{name}.md"]
    for path in candidates:
        if path.is_file():
            return path.read_text(encoding="utf-8").strip()
    raise FileNotFoundError(f"optimizer system prompt {name!r} not found under {SYSTEM_DIR}")


def messages(system: str, user: str) -> list[ChatMessage]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _with_meta(meta_skill: str, rest: str) -> str:
    block = meta_skill_block(meta_skill)
    return f"{block}\n\n{rest}" if block else rest


# ---------- reflect ----------


def analyst_user(
    *, skill: str, mode: str, max_budget: int, step_buffer: str, meta_skill: str, kind: str, trajectories: str, k: int
) -> str:
    parts = [f"## Current Skill\n{skill}\n"]
    if mode == "full_rewrite_minibatch":
        parts.append(
            "## Update Format\nDo not propose edits, patches or suggestions: return one complete replacement "
            "skill document as your single skill candidate.\n"
        )
    else:
        _, label, title = PAYLOAD[mode]
        parts.append(f"## {title} Budget\nL={max_budget} {label} at most.\n")
    if step_buffer:
        parts.append(f"## Previous Steps in This Epoch\n{step_buffer}\n")
    block = meta_skill_block(meta_skill)
    if block:
        parts.append(block + "\n")
    heading = "Failed Trajectories" if kind == "failure" else "Successful Trajectories"
    parts.append(f"## {heading} ({k} total)\n{trajectories}")
    return "\n".join(parts)


def analyst_system(kind: str, mode: str, env: str, skill_aware: bool, appendix_source: str) -> str:
    name = ("analyst_error" if kind == "failure" else "analyst_success") + MODE_SUFFIX[mode]
    text = system_prompt(name, env if mode == "patch" else "")
    if skill_aware and mode != "full_rewrite_minibatch" and (kind == "failure" or appendix_source != "failure_only"):
        text += "\n" + system_prompt(f"skill_aware_{kind}_suffix")
    return text


# ---------- aggregate ----------


def merge_user(*, meta_skill: str, skill: str, patches: list[Patch], level: int) -> str:
    body = (
        f"## Current Skill\n{skill}\n\n## Patches to merge ({len(patches)} total, merge level {level})\n"
        + json.dumps(patches, indent=2, ensure_ascii=False)
    )
    return _with_meta(meta_skill, body)


def final_merge_user(*, meta_skill: str, skill: str, mode: str, failure: Patch, success: Patch) -> str:
    key = PAYLOAD[mode][0]
    n, m = len(items_of(failure, key)), len(items_of(success, key))
    if mode == "full_rewrite_minibatch":
        head = (
            f"## Two pre-merged candidate groups to combine\nGroup 1 (from failed trajectories): {n} skill candidates\n"
            f"Group 2 (from successful trajectories): {m} skill candidates\n"
        )
    else:
        head = (
            f"## Two pre-merged patch groups to combine\nGroup 1 (failure-driven, HIGH priority): {n} edits\n"
            f"Group 2 (success-driven, lower priority): {m} edits\n"
        )
    body = f"## Current Skill\n{skill}\n\n{head}\n" + json.dumps([failure, success], indent=2, ensure_ascii=False)
    return _with_meta(meta_skill, body)


# ---------- select (ranking; autonomous budget) ----------


def describe_item(item: Item, mode: str) -> str:
    """One line per pool item; values as Python repr, parts joined by two spaces, nothing cut."""
    if mode == "rewrite_from_suggestions":
        parts = [
            f"type={item.get('type')}",
            f"title={item.get('title', '')!r}",
            f"instruction={item.get('instruction', '')!r}",
        ]
        if item.get("priority_hint"):
            parts.append(f"priority={item['priority_hint']}")
        if "support_count" in item:
            parts.append(f"support={item['support_count']}")
    elif mode == "full_rewrite_minibatch":
        parts = [
            f"title={item.get('title', '')!r}",
            f"change_summary={item.get('change_summary', [])!r}",
            f"source={item.get('source_type')}",
            f"support={item.get('support_count')}",
            f"new_skill_preview={item.get('new_skill', '')!r}",
        ]
    else:
        parts = [f"op={item.get('op')}"]
        if item.get("target"):
            parts.append(f"target={item['target']!r}")
        if item.get("content"):
            parts.append(f"content={item['content']!r}")
        if "support_count" in item:
            parts.append(f"support={item['support_count']}")
    return "  ".join(parts)


def pool_lines(items: list[Item], mode: str) -> str:
    return "\n".join(f"[{i}] {describe_item(it, mode)}" for i, it in enumerate(items))


def ranking_user(*, meta_skill: str, skill: str, items: list[Item], budget: int, mode: str) -> str:
    _, label, title = PAYLOAD[mode]
    lines = pool_lines(items, mode)
    body = (
        f"## Current Skill\n{skill}\n\n## {title} Pool ({len(items)} {label}, budget={budget})\n{lines}\n\n"
        f"Choose the {budget} most important {label} and list their zero-based indices in selected_indices, "
        "most important first."
    )
    return _with_meta(meta_skill, body)


def lr_user(
    *,
    meta_skill: str,
    skill: str,
    items: list[Item],
    mode: str,
    rollout_n: int,
    rollout_hard: float,
    rollout_soft: float,
    step_buffer: str,
) -> str:
    label = PAYLOAD[mode][1]
    lines = pool_lines(items, mode)
    body = (
        f"## Current Skill\n{skill}\n\n## Current Step Evidence\nrollout_n={rollout_n}\nrollout_hard={rollout_hard:.6f}\n"
        f"rollout_soft={rollout_soft:.6f}\nproposed_update_items={len(items)}\nupdate_item_type={label}\n\n"
        f"## Proposed Update Items\n{lines}\n\nHow many of these {label} should be applied at this step?"
    )
    if step_buffer:
        body += f"\n\n## Previous Steps in This Epoch\n{step_buffer}"
    return _with_meta(meta_skill, body)


# ---------- update (rewrite from suggestions) ----------


def rewrite_user(*, skill: str, suggestions: list[Item], step_buffer: str) -> str:
    body = f"## Current Skill\n{skill}\n\n## Selected Revise Suggestions ({len(suggestions)} total)\n" + json.dumps(
        suggestions, indent=2, ensure_ascii=False
    )
    if step_buffer:
        body += f"\n\n## Previous Steps in This Epoch\n{step_buffer}"
    return body + "\n\nReturn the whole rewritten skill document in new_skill."


# ---------- epoch boundary (slow update, meta skill) ----------


def slow_update_user(*, prev_skill: str, curr_skill: str, prev_guidance: str, comparison: str) -> str:
    guidance = prev_guidance or "(none yet: no slow-update guidance has been written before this epoch)"
    return (
        f"## Previous Epoch's Skill\n{prev_skill}\n\n## Current Epoch's Skill\n{curr_skill}\n\n"
        "## Previous Slow Update Guidance\nThis guidance was active in the protected section during the epoch that "
        f"just ended; judge first whether it helped or hurt.\n{guidance}\n\n"
        f"## Longitudinal Comparison (same 20 tasks, two skill versions)\n{comparison}"
    )


def meta_skill_user(*, prev_skill: str, curr_skill: str, prev_meta: str, comparison: str) -> str:
    meta = prev_meta or "(none yet: this is the first update)"
    return (
        f"## Previous Epoch Last-Step Skill\n{prev_skill}\n\n## Current Epoch Last-Step Skill\n{curr_skill}\n\n"
        "## Previous Optimizer Meta Skill\nThis memory was available to the optimizer during the epoch; judge whether "
        f"it improved or harmed the quality of its edits.\n{meta}\n\n"
        f"## Longitudinal Comparison (same tasks, two last-step skills)\n{comparison}"
    )


def consolidate_user(notes: list[str]) -> str:
    listing = "\n".join(f"{i}. {n}" for i, n in enumerate(notes, start=1))
    return (
        f"## Current Execution Notes ({len(notes)} total)\n{listing}\n\n"
        'Return a shorter list that keeps every distinct reminder, as {"appendix_notes": [...]}.'
    )


# ---------- reply schemas (field names as the reference; lenient where the reference is) ----------

_STR: JSONObject = {"type": "string"}
ITEM_SCHEMA: dict[str, JSONValue] = {
    "edits": {"type": "object", "properties": {"op": _STR, "target": _STR, "content": _STR}, "required": ["op"]},
    "revise_suggestions": {
        "type": "object",
        "properties": {"type": _STR, "title": _STR, "motivation": _STR, "instruction": _STR, "priority_hint": _STR},
    },
    "skill_candidates": {
        "type": "object",
        "properties": {"title": _STR, "change_summary": {"type": "array", "items": _STR}, "new_skill": _STR},
    },
}


def payload_schema(mode: str) -> JSONObject:
    key = PAYLOAD[mode][0]
    return {
        "type": "object",
        "properties": {"reasoning": _STR, key: {"type": "array", "items": ITEM_SCHEMA[key]}},
        "required": [key],
    }


def analyst_schema(kind: str, mode: str, notes: bool) -> JSONObject:
    summary: JSONObject = (
        {
            "failure_summary": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"failure_type": _STR, "count": {"type": "integer"}, "description": _STR},
                },
            }
        }
        if kind == "failure"
        else {"success_patterns": {"type": "array", "items": _STR}}
    )
    props: JSONObject = {"batch_size": {"type": "integer"}, **summary, "patch": payload_schema(mode)}
    if notes:
        props["appendix_notes"] = {"type": "array"}
    # a skill-aware failure analyst may answer with execution-lapse notes alone, as in the reference
    required: list[JSONValue] = [] if notes and kind == "failure" else ["patch"]
    return {"type": "object", "properties": props, "required": required}


RANKING_SCHEMA = {
    "type": "object",
    "properties": {"reasoning": _STR, "selected_indices": {"type": "array"}},
    "required": ["selected_indices"],
}
# learning_rate is coerced from whatever the model wrote ("3 edits" -> 3), so its type is not constrained here
LR_SCHEMA = {
    "type": "object",
    "properties": {
        "learning_rate": {},
        "reasoning": _STR,
        "confidence": _STR,
        "risk_notes": {"type": "array", "items": _STR},
    },
    "required": ["learning_rate"],
}
REWRITE_SCHEMA = {
    "type": "object",
    "properties": {"reasoning": _STR, "change_summary": {"type": "array", "items": _STR}, "new_skill": _STR},
    "required": ["new_skill"],
}
SLOW_UPDATE_SCHEMA = {
    "type": "object",
    "properties": {"reasoning": _STR, "slow_update_content": _STR},
    "required": ["slow_update_content"],
}
META_SKILL_SCHEMA = {
    "type": "object",
    "properties": {"reasoning": _STR, "meta_skill_content": _STR},
    "required": ["meta_skill_content"],
}
CONSOLIDATE_SCHEMA = {
    "type": "object",
    "properties": {"appendix_notes": {"type": "array", "items": _STR}},
    "required": ["appendix_notes"],
}
