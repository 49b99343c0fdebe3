"""Stage 2 — reflect: analysts read failure and success minibatches in parallel and propose patches."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from envs.base import EpisodeResult
from skillopt_ray import prompts
from skillopt_ray.llm.types import ChatRequest, MalformedOutput
from skillopt_ray.skill.edits import Edit


@dataclass
class Patch:
    source: str  # failure | success
    summary: str = ""
    edits: list[Edit] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    candidate: str = ""  # full_rewrite_minibatch
    lapses: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "summary": self.summary, "edits": [e.to_dict() for e in self.edits],
                "suggestions": self.suggestions, "candidate": self.candidate, "lapses": self.lapses}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Patch":
        return Patch(d["source"], d.get("summary", ""), [Edit.from_dict(e) for e in d.get("edits", [])],
                     list(d.get("suggestions", [])), d.get("candidate", ""), list(d.get("lapses", [])))


@dataclass
class ReflectOutput:
    patches: list[Patch]
    dropped: int = 0  # minibatches whose output stayed malformed after the re-ask

    def to_dict(self) -> dict[str, Any]:
        return {"patches": [p.to_dict() for p in self.patches], "dropped": self.dropped}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "ReflectOutput":
        return ReflectOutput([Patch.from_dict(p) for p in d["patches"]], d.get("dropped", 0))


def minibatches(results: list[EpisodeResult], size: int, rng: random.Random) -> tuple[list[list[EpisodeResult]], list[list[EpisodeResult]]]:
    """Failures and successes split, each shuffled with the step's RNG and cut into minibatches."""
    fails = [r for r in results if not r.success and not r.infra_error and not r.data_error]
    wins = [r for r in results if r.success]
    rng.shuffle(fails)
    rng.shuffle(wins)
    cut = lambda xs: [xs[i : i + size] for i in range(0, len(xs), size)]  # noqa: E731
    return cut(fails), cut(wins)


def _schema(mode: str, skill_aware: bool) -> dict[str, Any]:
    if mode == "rewrite_from_suggestions":
        return prompts.SUGGESTIONS_SCHEMA
    if mode == "full_rewrite_minibatch":
        return prompts.CANDIDATE_SCHEMA
    return prompts.SKILL_AWARE_SCHEMA if skill_aware else prompts.ANALYST_SCHEMA


async def reflect(llm: Any, results: list[EpisodeResult], *, mode: str, skill_aware: bool, minibatch_size: int,
                  rng: random.Random, context: str, key: str) -> ReflectOutput:
    fail_mbs, win_mbs = minibatches(results, minibatch_size, rng)
    jobs = [("failure", i, mb) for i, mb in enumerate(fail_mbs)] + [("success", i, mb) for i, mb in enumerate(win_mbs)]
    schema = _schema(mode, skill_aware)

    async def one(kind: str, i: int, mb: list[EpisodeResult]) -> Patch | None:
        msgs = prompts.analyst_messages(kind, mode, skill_aware and kind == "failure", mb, context)
        try:
            res = await llm.chat_json(ChatRequest("optimizer", "analyst", msgs, f"{key}/analyst/{kind}{i}"), schema, "analysis")
        except MalformedOutput:
            return None
        d = res.data
        return Patch(
            source=kind,
            summary=str(d.get("summary", "")),
            edits=[Edit.from_dict({**e, "source": kind}) for e in d.get("edits", [])],
            suggestions=[str(s) for s in d.get("suggestions", [])],
            candidate=str(d.get("skill", "")),
            lapses=[str(s) for s in d.get("lapses", [])] if kind == "failure" else [],
        )

    outs = await asyncio.gather(*(one(*j) for j in jobs))
    patches = [p for p in outs if p is not None]
    return ReflectOutput(patches, dropped=sum(p is None for p in outs))
