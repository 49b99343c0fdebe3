"""Stage 4 — select: this step's edit budget (the learning rate) and, when the merged pool is larger,
one ranking call that keeps the most important items, as the reference does."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from skillopt_envs.chat import ChatRequest
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray import prompts
from skillopt_ray.llm.types import MalformedOutput
from skillopt_ray.runs.payload import Item, LrChoice, Patch, RankingReply, items_of

NO_BOUND = 999  # lr_schedule=autonomous: every merged item is kept, no ranking call


def scheduled_lr(schedule: str, k: int, total_steps: int, max_lr: int, min_lr: int) -> int:
    """Budget at the k-th scheduler step (1-indexed), Python rounding, clamped below by min_lr only."""
    if schedule == "autonomous":
        return NO_BOUND
    if schedule == "constant" or total_steps <= 1:
        return max_lr
    t = min(k, total_steps) / total_steps
    if schedule == "linear":
        value = max_lr + (min_lr - max_lr) * t
    elif schedule == "cosine":
        value = min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * t))
    else:
        raise ValueError(f"unknown lr schedule {schedule!r}")
    return max(min_lr, round(value))


def coerce_nonnegative_int(v: Any) -> Optional[int]:
    """The optimizer's chosen count: 3 -> 3, -2 -> 0, 2.5 -> 2, "3 edits" -> 3, [2] -> 2; None when unusable."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return max(0, v)
    if isinstance(v, float) and v.is_integer():
        return max(0, int(v))
    m = re.search(r"-?\d+", str(v))
    return max(0, int(m.group())) if m else None


@dataclass
class SelectOutput:
    """select.json: the step's budget, the selected patch and how it was chosen; `lr_step` is the scheduler's
    counter after this step."""

    budget: int
    selected: Patch = field(default_factory=Patch)  # {reasoning, <payload key>: [...], ranking_details?}
    ranked: bool = False
    fallback: str = ""
    lr_decision: Optional[LrChoice] = None
    lr_step: int = 0

    def items(self, mode: str) -> list[Item]:
        return items_of(self.selected, prompts.PAYLOAD[mode][0])

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @staticmethod
    def from_dict(d: Any) -> SelectOutput:
        """select.json as read back (the memo's JSON)."""
        return SelectOutput(**d)


async def autonomous_lr(
    llm: Any,
    *,
    skill: str,
    items: list[Item],
    mode: str,
    meta_skill: str,
    rollout_n: int,
    rollout_hard: float,
    rollout_soft: float,
    step_buffer: str,
    key: str,
) -> LrChoice:
    """lr_control_mode=autonomous: one call decides how many items to apply; 0 on an unusable reply."""
    user = prompts.lr_user(
        meta_skill=meta_skill,
        skill=skill,
        items=items,
        mode=mode,
        rollout_n=rollout_n,
        rollout_hard=rollout_hard,
        rollout_soft=rollout_soft,
        step_buffer=step_buffer,
    )
    rec = LrChoice(
        learning_rate=0,
        raw_learning_rate=None,
        available_update_items=len(items),
        clamped=False,
        fallback=True,
        reasoning="",
        confidence="",
        risk_notes=[],
        raw_response="",
    )
    messages = prompts.messages(prompts.system_prompt("lr_autonomous"), user)
    try:
        res = await llm.chat_json(
            ChatRequest("optimizer", "lr_autonomous", messages, f"{key}/lr"), prompts.LR_SCHEMA, "learning_rate"
        )
    except MalformedOutput as e:
        rec["error"] = e.message
        return rec
    d = res.data
    rec["raw_response"], rec["raw_learning_rate"] = res.raw, d.get("learning_rate")
    rec["reasoning"], rec["confidence"] = str(d.get("reasoning", "")), str(d.get("confidence", ""))
    rec["risk_notes"] = d.get("risk_notes") or []
    n = coerce_nonnegative_int(d.get("learning_rate"))
    if n is not None:
        rec["learning_rate"], rec["clamped"], rec["fallback"] = min(n, len(items)), n > len(items), False
    return rec


def _pick(reply: Any, n_items: int, budget: int) -> list[int]:
    """Walk selected_indices: ints (True counts as 1) in range, first occurrence; stop once the budget is
    reached. The reference checks the budget after every entry, usable or not: with a budget of 0 a usable first
    entry is kept (quirk: zero-budget-keeps-one) and an unusable one ends the walk with nothing kept."""
    raw = reply.get("selected_indices") if isinstance(reply, dict) else None
    picked: list[int] = []
    for idx in raw if isinstance(raw, list) else []:
        if isinstance(idx, int) and 0 <= idx < n_items and idx not in picked:
            picked.append(int(idx))
        if len(picked) >= budget:
            break
    return picked


async def rank_and_select(
    llm: Any, *, skill: str, merged: Patch, budget: int, mode: str, meta_skill: str, key: str
) -> SelectOutput:
    pk, label, _ = prompts.PAYLOAD[mode]
    items = items_of(merged, pk)
    out = SelectOutput(budget=budget, selected=merged)
    if len(items) <= budget:
        return out
    out.ranked = True
    system = prompts.system_prompt("ranking_rewrite" if mode == "rewrite_from_suggestions" else "ranking")
    user = prompts.ranking_user(meta_skill=meta_skill, skill=skill, items=items, budget=budget, mode=mode)
    reply: Optional[RankingReply] = None
    try:
        reply = (
            await llm.chat_json(
                ChatRequest("optimizer", "ranking", prompts.messages(system, user), f"{key}/rank"),
                prompts.RANKING_SCHEMA,
                "ranking",
            )
        ).data
    except MalformedOutput as e:
        out.fallback = e.message
    picked = _pick(reply, len(items), budget)
    reasoning = str(merged.get("reasoning", ""))
    if picked and reply is not None:  # indices come only from a reply
        out.selected = Patch(reasoning=f"{reasoning} [optimizer-ranked: selected {len(picked)}/{len(items)} {label}]")
        out.selected[pk] = [items[i] for i in picked]
        out.selected["ranking_details"] = reply
    else:
        out.fallback = out.fallback or "the ranking named no usable index"
        out.selected = Patch(reasoning=f"{reasoning} [fallback truncated {len(items)}->{budget} {label}]")
        out.selected[pk] = items[:budget]
    return out
