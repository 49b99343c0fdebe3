"""Stage 3 — aggregate: hierarchical merge of patches, failures and successes apart, then a final
merge where failure edits win conflicts. A failed merge call falls back to concatenation (logged)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional, TypeVar

from skillopt_ray import prompts
from skillopt_ray.llm.types import ChatRequest, MalformedOutput
from skillopt_ray.skill.edits import Edit

T = TypeVar("T")


@dataclass
class AggregateOutput:
    edits: list[Edit] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    candidate: str = ""
    merge_calls: int = 0
    fallbacks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"edits": [e.to_dict() for e in self.edits], "suggestions": self.suggestions, "candidate": self.candidate,
                "merge_calls": self.merge_calls, "fallbacks": self.fallbacks}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "AggregateOutput":
        return AggregateOutput([Edit.from_dict(e) for e in d["edits"]], list(d.get("suggestions", [])), d.get("candidate", ""),
                               d.get("merge_calls", 0), list(d.get("fallbacks", [])))


def _valid_edits(raw: list[dict[str, Any]], source: str) -> list[Edit]:
    edits = [Edit.from_dict({**e, "source": e.get("source") or source}) for e in raw if isinstance(e, dict)]
    return [e for e in edits if e.validation_error() is None]


async def _merge_group(llm: Any, groups: list[list[Edit]], source: str, key: str, final: bool, out: AggregateOutput) -> list[Edit]:
    msgs = prompts.merge_messages([[e.to_dict() for e in g] for g in groups], final)
    out.merge_calls += 1
    try:
        res = await llm.chat_json(ChatRequest("optimizer", "merge", msgs, key), prompts.MERGE_SCHEMA, "merge")
        return _valid_edits(res.data["edits"], source)
    except MalformedOutput as e:
        out.fallbacks.append(f"{key}: {e.message}; concatenated instead")
        return [x for g in groups for x in g]


async def _reduce_levels(items: list[T], size: int, merge: Callable[[list[T], int, int], Awaitable[T]]) -> Optional[T]:
    """Merge groups of `size` items with one call each, in parallel, level by level, until one remains.
    `merge(group, depth, group_index)`; a group of one passes up unchanged; empty results drop out."""
    if size < 2:
        raise ValueError("merge_batch_size must be >= 2")
    level = [x for x in items if x]
    depth = 0
    while len(level) > 1:
        groups = [level[i : i + size] for i in range(0, len(level), size)]
        merged = await asyncio.gather(*(merge(g, depth, j) if len(g) > 1 else _identity(g[0]) for j, g in enumerate(groups)))
        level = [m for m in merged if m]
        depth += 1
    return level[0] if level else None


async def _identity(x: T) -> T:
    return x


async def merge_hierarchical(llm: Any, patches: list[list[Edit]], merge_batch_size: int, source: str, key: str, out: AggregateOutput) -> list[Edit]:
    """Hierarchical merge of edit patches of one source (failure or success)."""
    async def merge(group: list[list[Edit]], depth: int, j: int) -> list[Edit]:
        return await _merge_group(llm, group, source, f"{key}/merge/{source}/L{depth}/g{j}", False, out)

    return await _reduce_levels(patches, merge_batch_size, merge) or []


async def _merge_candidates(llm: Any, candidates: list[str], merge_batch_size: int, key: str, out: AggregateOutput) -> str:
    """Hierarchical merge of whole candidate documents (full_rewrite_minibatch)."""
    async def merge(group: list[str], depth: int, j: int) -> str:
        out.merge_calls += 1
        try:
            res = await llm.chat_json(ChatRequest("optimizer", "merge", prompts.merge_candidates_messages(group),
                                                  f"{key}/merge_cand/L{depth}/g{j}"), prompts.REWRITE_SCHEMA, "skill")
            return res.data["skill"]
        except MalformedOutput as e:
            out.fallbacks.append(f"candidate merge L{depth} g{j}: {e.message}; kept the first candidate")
            return group[0]

    return await _reduce_levels([c for c in candidates if c.strip()], merge_batch_size, merge) or ""


async def aggregate(llm: Any, patches: list[Any], *, mode: str, merge_batch_size: int, key: str) -> AggregateOutput:
    out = AggregateOutput()
    fail_first = sorted(patches, key=lambda p: p.source != "failure")
    if mode == "rewrite_from_suggestions":
        seen: set[str] = set()
        out.suggestions = [s for p in fail_first for s in p.suggestions if not (s in seen or seen.add(s))]
        return out
    if mode == "full_rewrite_minibatch":
        out.candidate = await _merge_candidates(llm, [p.candidate for p in fail_first], merge_batch_size, key, out)
        return out
    fails = [p.edits for p in patches if p.source == "failure" and p.edits]
    wins = [p.edits for p in patches if p.source == "success" and p.edits]
    f_merged, s_merged = await asyncio.gather(
        merge_hierarchical(llm, fails, merge_batch_size, "failure", key, out),
        merge_hierarchical(llm, wins, merge_batch_size, "success", key, out),
    )
    if f_merged and s_merged:
        out.edits = await _merge_group(llm, [f_merged, s_merged], "failure", f"{key}/merge/final", True, out)
    else:
        out.edits = f_merged or s_merged
    return out
