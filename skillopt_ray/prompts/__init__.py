"""Optimizer prompts and the JSON schemas their replies must match."""

from __future__ import annotations

import json
from typing import Any

from envs.base import EpisodeResult

EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "op": {"type": "string", "enum": ["append", "insert_after", "replace", "delete"]},
        "target": {"type": "string"},
        "content": {"type": "string"},
        "rationale": {"type": "string"},
    },
    "required": ["op"],
}

ANALYST_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "edits": {"type": "array", "items": EDIT_SCHEMA, "maxItems": 8}},
    "required": ["summary", "edits"],
}
SKILL_AWARE_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "edits": {"type": "array", "items": EDIT_SCHEMA, "maxItems": 8},
        "lapses": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    },
    "required": ["summary", "edits", "lapses"],
}
SUGGESTIONS_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "suggestions": {"type": "array", "items": {"type": "string"}, "maxItems": 8}},
    "required": ["summary", "suggestions"],
}
REWRITE_SCHEMA = {"type": "object", "properties": {"skill": {"type": "string", "minLength": 1}}, "required": ["skill"]}
CANDIDATE_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "skill": {"type": "string", "minLength": 1}},
    "required": ["summary", "skill"],
}
MERGE_SCHEMA = {"type": "object", "properties": {"edits": {"type": "array", "items": EDIT_SCHEMA}}, "required": ["edits"]}
RANK_SCHEMA = {"type": "object", "properties": {"ranking": {"type": "array", "items": {"type": "integer"}}}, "required": ["ranking"]}
SLOW_UPDATE_SCHEMA = {"type": "object", "properties": {"guidance": {"type": "string", "minLength": 1}}, "required": ["guidance"]}
META_SKILL_SCHEMA = {"type": "object", "properties": {"meta_skill": {"type": "string", "minLength": 1}}, "required": ["meta_skill"]}
NOTES_SCHEMA = {"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string"}}}, "required": ["notes"]}

SYSTEM = (
    "You are the optimizer in SkillOpt: you improve a Markdown skill document that a frozen agent reads "
    "before acting. Edit only the editable body; never touch text between <!-- SKILLOPT:... --> markers. "
    "Reply with JSON only."
)


def _trajectory_text(r: EpisodeResult, limit: int = 1800) -> str:
    steps = []
    for t in r.trajectory:
        if "action" in t or "observation" in t:
            a = t.get("action")
            o = str(t.get("observation", ""))[:200]
            steps.append(f"> {a}\n{o}" if a is not None else o)
        elif "code" in t:
            steps.append(f"[code]\n{str(t['code'])[:600]}\n[result] {str(t.get('feedback', ''))[:300]}")
        else:
            steps.append(json.dumps(t)[:300])
    text = "\n".join(steps)
    if len(text) > limit:
        text = text[: limit // 2] + "\n...\n" + text[-limit // 2 :]
    return text


def episodes_block(results: list[EpisodeResult]) -> str:
    parts = []
    for r in results:
        head = f"### {r.task_id} ({r.task_type}) hard={r.hard:.2f} soft={r.soft:.2f} turns={r.n_turns}"
        if r.fail_reason:
            head += f" fail_reason={r.fail_reason}"
        parts.append(head + "\n" + _trajectory_text(r))
    return "\n\n".join(parts)


def context_block(skill: str, budget: int, step_buffer: list[dict[str, Any]], meta_skill: str) -> str:
    lines = ["## Current skill", skill.strip(), "", f"## Edit budget this step: at most {budget} edits will be kept."]
    if meta_skill:
        lines += ["", "## Optimizer meta skill (lessons from earlier epochs)", meta_skill.strip()]
    if step_buffer:
        lines += ["", "## Earlier this epoch"]
        for entry in step_buffer[-6:]:
            for s in entry.get("failure_patterns", [])[:3]:
                lines.append(f"- failure pattern (step {entry['step']}): {s[:300]}")
            for rej in entry.get("rejected_edits", [])[:4]:
                lines.append(f"- REJECTED edit (score {rej['score']:.3f}): {json.dumps(rej['edit'])[:300]}")
    return "\n".join(lines)


def analyst_messages(kind: str, mode: str, skill_aware: bool, results: list[EpisodeResult], ctx: str) -> list[dict[str, str]]:
    what = "failed" if kind == "failure" else "succeeded"
    if mode == "rewrite_from_suggestions":
        ask = 'Reply as {"summary": "...", "suggestions": ["..."]}: concrete suggestions for the skill.'
    elif mode == "full_rewrite_minibatch":
        ask = 'Reply as {"summary": "...", "skill": "<the whole improved skill document>"}.'
    else:
        ask = (
            'Reply as {"summary": "...", "edits": [{"op": "append|insert_after|replace|delete", "target": "<exact text '
            'in the skill, for insert_after/replace/delete>", "content": "<new text>"}]}.'
        )
        if skill_aware:
            ask += (
                ' Tag each failure: a skill defect becomes an edit; an execution lapse (the skill was right but the '
                'agent did not follow it) becomes a short note in "lapses": ["..."].'
            )
    user = (
        f"{ctx}\n\n## Episodes that {what}\n{episodes_block(results)}\n\n"
        f"Analyse why these episodes {what} and what the skill should say. {ask}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def merge_messages(patch_edits: list[list[dict[str, Any]]], final: bool) -> list[dict[str, str]]:
    body = "\n\n".join(f"### Patch {i}\n{json.dumps(e, ensure_ascii=False)}" for i, e in enumerate(patch_edits))
    rule = (
        "Patch 0 holds edits from failures, patch 1 from successes; when they conflict, the failure edit wins."
        if final
        else "Merge them: drop duplicates, combine overlapping edits, keep targets exact."
    )
    user = f"Merge these edit patches into one.\n{rule}\n\n{body}\n\nReply as {{\"edits\": [...]}}."
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def rank_messages(skill: str, edits: list[dict[str, Any]], budget: int, autonomous: bool) -> list[dict[str, str]]:
    listing = "\n".join(f"{i}: {json.dumps(e, ensure_ascii=False)}" for i, e in enumerate(edits))
    if autonomous:
        ask = "Choose how many edits are worth applying (at least 1) and list their indices, best first."
    else:
        ask = f"Rank the edits by expected benefit and list the indices of the best {budget}, best first."
    user = f"## Current skill\n{skill}\n\n## Candidate edits\n{listing}\n\n{ask} Reply as {{\"ranking\": [indices]}}."
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def rewrite_messages(skill: str, suggestions: list[str]) -> list[dict[str, str]]:
    listing = "\n".join(f"- {s}" for s in suggestions)
    user = (
        f"## Current skill\n{skill}\n\n## Suggestions\n{listing}\n\nRewrite the skill document applying the "
        'suggestions. Keep it concise. Reply as {"skill": "<whole document>"}.'
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def merge_candidates_messages(candidates: list[str]) -> list[dict[str, str]]:
    body = "\n\n".join(f"### Candidate {i}\n{c}" for i, c in enumerate(candidates))
    user = f"Merge these candidate skill documents into one, keeping the best guidance of each.\n\n{body}\n\nReply as {{\"skill\": \"...\"}}."
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def slow_update_messages(skill: str, pairs: dict[str, list[str]]) -> list[dict[str, str]]:
    parts = [f"### {cat} ({len(items)})\n" + "\n".join(items[:8]) for cat, items in pairs.items() if items]
    user = (
        f"## Current skill\n{skill}\n\n## Same tasks, previous epoch's skill vs current skill\n" + "\n\n".join(parts)
        + '\n\nWrite short, target-facing guidance that keeps the improvements and fixes the regressions and persistent '
        'failures. Reply as {"guidance": "..."}.'
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def meta_skill_messages(meta_skill: str, history: list[dict[str, Any]]) -> list[dict[str, str]]:
    lines = [f"- step {h['global_step']}: {h['action']} score={h.get('candidate_score')} edits={h.get('n_selected')}" for h in history[-20:]]
    user = (
        f"## Current optimizer meta skill\n{meta_skill or '(none)'}\n\n## This epoch's steps\n" + "\n".join(lines)
        + '\n\nWrite guidance for the optimizer itself (which kinds of edits were accepted or rejected, what to try). '
        'Reply as {"meta_skill": "..."}.'
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def consolidate_messages(notes: list[str], limit: int) -> list[dict[str, str]]:
    listing = "\n".join(f"- {n}" for n in notes)
    user = f"Consolidate these execution notes into at most {limit} non-redundant notes.\n{listing}\n\nReply as {{\"notes\": [...]}}."
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
