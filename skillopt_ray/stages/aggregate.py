"""Stage 3 — aggregate: hierarchical merge of patches, failures and successes apart, then one final
merge where failure items win conflicts, as in the reference. A merge whose reply is unusable falls
back to concatenation, and the fallback is recorded."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from skillopt_envs.chat import ChatRequest
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray import prompts
from skillopt_ray.llm.types import MalformedOutput
from skillopt_ray.runs.payload import Item, Patch, PayloadKey, items_of


@dataclass
class AggregateOutput:
    """aggregate.json: the merged patch, the merge calls made and the merges that fell back to concatenation."""

    merged: Patch = field(default_factory=Patch)  # {reasoning, <payload key>: [...], ...}
    calls: int = 0
    fallbacks: list[str] = field(default_factory=list)

    def items(self, mode: str) -> list[Item]:
        return items_of(self.merged, prompts.PAYLOAD[mode][0])

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @staticmethod
    def from_dict(d: Any) -> AggregateOutput:
        """aggregate.json as read back (the memo's JSON)."""
        return AggregateOutput(**d)


@dataclass
class _Merger:
    llm: Any
    mode: str
    skill: str
    meta_skill: str
    key: str
    out: AggregateOutput

    @property
    def pk(self) -> PayloadKey:
        return prompts.PAYLOAD[self.mode][0]

    async def _ask(self, system: str, user: str, key: str) -> Patch | None:
        self.out.calls += 1
        try:
            res = await self.llm.chat_json(
                ChatRequest("optimizer", "merge", prompts.messages(system, user), key),
                prompts.payload_schema(self.mode),
                "merge",
            )
        except MalformedOutput as e:
            self.out.fallbacks.append(f"{key}: {e.message}")
            return None
        return cast(Patch, dict(res.data))

    async def merge_chunk(self, kind: str, chunk: list[Patch], level: int, j: int) -> Patch:
        system = prompts.system_prompt(f"merge_{kind}{prompts.MODE_SUFFIX[self.mode]}")
        user = prompts.merge_user(meta_skill=self.meta_skill, skill=self.skill, patches=chunk, level=level)
        data = await self._ask(system, user, f"{self.key}/merge/{kind}/L{level}/g{j}")
        if data is not None:
            for it in data[self.pk]:
                it["merge_level"] = level
            return data
        items = [it for p in chunk for it in items_of(p, self.pk)]
        for it in items:
            if isinstance(it, dict):
                it.setdefault("merge_level", level)
        return self._patch("fallback concatenation", items)

    def _patch(self, reasoning: str, items: list[Item]) -> Patch:
        """A patch of the mode: {reasoning, <payload key>: items}, in that order."""
        patch = Patch(reasoning=reasoning)
        patch[self.pk] = items
        return patch

    async def hierarchical(self, kind: str, patches: list[Patch], batch: int) -> Patch:
        """Chunks of `batch` merged by one call each, in parallel, level by level; a chunk of one passes up."""
        if not patches:
            return self._patch("no patches", [])
        level, current = 1, patches
        while len(current) > 1:
            chunks = [current[i : i + batch] for i in range(0, len(current), batch)]
            current = list(
                await asyncio.gather(
                    *(self.merge_chunk(kind, c, level, j) if len(c) > 1 else _same(c[0]) for j, c in enumerate(chunks))
                )
            )
            level += 1
        return current[0]

    async def final(self, failure: Patch, success: Patch) -> Patch:
        f_items, s_items = items_of(failure, self.pk), items_of(success, self.pk)
        if not f_items and not s_items:
            return self._patch("no updates from either group", [])
        if not s_items:
            return failure
        if not f_items:
            return success
        system = prompts.system_prompt(f"merge_final{prompts.MODE_SUFFIX[self.mode]}")
        user = prompts.final_merge_user(
            meta_skill=self.meta_skill, skill=self.skill, mode=self.mode, failure=failure, success=success
        )
        data = await self._ask(system, user, f"{self.key}/merge/final")
        return data if data is not None else self._patch("fallback: failure first, then success", f_items + s_items)


async def _same(x: Patch) -> Patch:
    return x


async def aggregate(
    llm: Any,
    failure_patches: list[Patch],
    success_patches: list[Patch],
    *,
    mode: str,
    skill: str,
    meta_skill: str,
    merge_batch_size: int,
    key: str,
) -> AggregateOutput:
    if merge_batch_size < 2:
        raise ValueError("merge_batch_size must be >= 2")
    out = AggregateOutput()
    m = _Merger(llm, mode, skill, meta_skill, key, out)
    f, s = await asyncio.gather(
        m.hierarchical("failure", failure_patches, merge_batch_size),
        m.hierarchical("success", success_patches, merge_batch_size),
    )
    out.merged = await m.final(f, s)
    return out
