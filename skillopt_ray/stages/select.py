"""Stage 4 — select: the edit budget from the learning-rate schedule; a ranking call when edits exceed it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from skillopt_ray import prompts
from skillopt_ray.llm.types import ChatRequest, MalformedOutput
from skillopt_ray.skill.edits import Edit


def _round(x: float) -> int:
    return int(math.floor(x + 0.5))


def edit_budget(schedule: str, step: int, total_steps: int, lr: float, min_lr: float) -> int:
    """Budget for global step `step` (0-based) of `total_steps`. Autonomous returns the cap (lr)."""
    if schedule in ("constant", "autonomous") or total_steps <= 1:
        return max(1, _round(lr))
    frac = step / (total_steps - 1)
    if schedule == "linear":
        value = lr + (min_lr - lr) * frac
    elif schedule == "cosine":
        value = min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * frac))
    else:
        raise ValueError(f"unknown schedule {schedule!r}")
    return max(1, _round(value))


@dataclass
class SelectOutput:
    budget: int
    selected: list[Edit] = field(default_factory=list)
    ranking: list[int] = field(default_factory=list)
    ranked: bool = False
    fallback: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "selected": [e.to_dict() for e in self.selected], "ranking": self.ranking,
                "ranked": self.ranked, "fallback": self.fallback}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "SelectOutput":
        return SelectOutput(d["budget"], [Edit.from_dict(e) for e in d["selected"]], list(d.get("ranking", [])), d.get("ranked", False), d.get("fallback", ""))


async def select(llm: Any, skill: str, edits: list[Edit], *, budget: int, autonomous: bool, key: str) -> SelectOutput:
    out = SelectOutput(budget=budget)
    if len(edits) <= budget and not (autonomous and len(edits) > 1):
        out.selected = list(edits)
        return out
    msgs = prompts.rank_messages(skill, [e.to_dict() for e in edits], budget, autonomous)
    out.ranked = True
    try:
        res = await llm.chat_json(ChatRequest("optimizer", "ranking", msgs, f"{key}/rank"), prompts.RANK_SCHEMA, "ranking")
        seen: list[int] = []
        for i in res.data["ranking"]:
            if isinstance(i, int) and 0 <= i < len(edits) and i not in seen:  # invalid indices dropped
                seen.append(i)
        out.ranking = seen[:budget]
        if not out.ranking:
            raise MalformedOutput("ranking named no valid edit index")
    except MalformedOutput as e:
        out.fallback = f"{e.message}; kept the first {budget}"
        out.ranking = list(range(min(budget, len(edits))))
    out.selected = [edits[i] for i in out.ranking]
    return out
