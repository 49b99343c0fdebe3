"""Stage 3 — aggregate: hierarchical merge of patches, failures and successes apart, then one final
merge where failure items win conflicts, as in the reference. A merge whose reply is unusable falls
back to concatenation, and the fallback is recorded."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any

from skillopt_ray import prompts
from skillopt_ray.llm.types import ChatRequest, MalformedOutput


@dataclass
class AggregateOutput:
    merged: dict[str, Any] = field(default_factory=dict)  # {reasoning, <payload key>: [...], ...}
    calls: int = 0
    fallbacks: list[str] = field(default_factory=list)

    def items(self, mode: str) -> list[Any]:
        return list(self.merged.get(prompts.PAYLOAD[mode][0], []))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> AggregateOutput:
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
    def pk(self) -> str:
        return prompts.PAYLOAD[self.mode][0]

    async def _ask(self, system: str, user: str, key: str) -> dict[str, Any] | None:
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
        return dict(res.data)

    async def merge_chunk(self, kind: str, chunk: list[dict[str, Any]], level: int, j: int) -> dict[str, Any]:
        system = prompts.system_prompt(f"merge_{kind}{prompts.MODE_SUFFIX[self.mode]}")
        user = prompts.merge_user(meta_skill=self.meta_skill, skill=self.skill, patches=chunk, level=level)
        data = await self._ask(system, user, f"{self.key}/merge/{kind}/L{level}/g{j}")
        if data is not None:
            for it in data[self.pk]:
                it["merge_level"] = level
            return data
        items = [it for p in chunk for it in p.get(self.pk, [])]
        for it in items:
            if isinstance(it, dict):
                it.setdefault("merge_level", level)
        return {"reasoning": "fallback concatenation", self.pk: items}

    async def hierarchical(self, kind: str, patches: list[dict[str, Any]], batch: int) -> dict[str, Any]:
        """Chunks of `batch` merged by one call each, in parallel, level by level; a chunk of one passes up."""
        if not patches:
            return {"reasoning": "no patches", self.pk: []}
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

    async def final(self, failure: dict[str, Any], success: dict[str, Any]) -> dict[str, Any]:
        f_items, s_items = failure.get(self.pk, []), success.get(self.pk, [])
        if not f_items and not s_items:
            return {"reasoning": "no updates from either group", self.pk: []}
        if not s_items:
            return failure
        if not f_items:
            return success
        system = prompts.system_prompt(f"merge_final{prompts.MODE_SUFFIX[self.mode]}")
        user = prompts.final_merge_user(
            meta_skill=self.meta_skill, skill=self.skill, mode=self.mode, failure=failure, success=success
        )
        data = await self._ask(system, user, f"{self.key}/merge/final")
        return (
            data
            if data is not None
            else {"reasoning": "fallback: failure first, then success", self.pk: f_items + s_items}
        )


async def _same(x: dict[str, Any]) -> dict[str, Any]:
    return x


async def aggregate(
    llm: Any,
    failure_patches: list[dict[str, Any]],
    success_patches: list[dict[str, Any]],
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
