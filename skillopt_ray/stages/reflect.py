"""Stage 2 — reflect: analysts read failure and success minibatches in parallel and propose patches
as the reference does. Episodes that failed for infrastructure or data reasons are never shown."""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, TypedDict, cast

from skillopt_envs.base import EpisodeResult
from skillopt_envs.chat import ChatRequest
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray import prompts
from skillopt_ray.llm.types import MalformedOutput
from skillopt_ray.prompts.render import minibatch_text
from skillopt_ray.runs.payload import Patch
from skillopt_ray.stages.context import OptimizerContext


def is_failure(r: EpisodeResult) -> bool:
    return not r.hard or float(r.hard) < 1e-9


def is_success(r: EpisodeResult) -> bool:
    return bool(r.hard)


def scored(results: list[EpisodeResult]) -> list[EpisodeResult]:
    """Episodes whose score means something: infra and data errors are left out."""
    return [r for r in results if r.scored]


def split_minibatches(
    results: list[EpisodeResult], size: int, batch_seed: int, failure_only: bool
) -> tuple[list[list[EpisodeResult]], list[list[EpisodeResult]]]:
    """Failures shuffled with Random(batch_seed), successes with Random(batch_seed + 1), cut into minibatches.
    With repeated rollouts a task's repeats stay together (`grouped_minibatches`)."""
    fails = [r for r in scored(results) if is_failure(r)]
    wins = [] if failure_only else [r for r in scored(results) if is_success(r)]
    if any(int((r.info or {}).get("repeats") or 1) > 1 for r in results):
        return grouped_minibatches(fails, size, batch_seed), grouped_minibatches(wins, size, batch_seed + 1)
    random.Random(batch_seed).shuffle(fails)
    random.Random(batch_seed + 1).shuffle(wins)
    cut = lambda xs: [xs[i : i + size] for i in range(0, len(xs), size)]  # noqa: E731
    return cut(fails), cut(wins)


def grouped_minibatches(results: list[EpisodeResult], size: int, seed: int) -> list[list[EpisodeResult]]:
    """Repeated rollouts: each task's episodes as one group (in repeat order), the groups shuffled with
    Random(seed) and packed whole into minibatches of at most `size` episodes (a larger group gets its own),
    so an analyst sees a task's repeats side by side."""
    groups: dict[str, list[EpisodeResult]] = {}
    for r in results:
        groups.setdefault(r.task_id, []).append(r)
    order = list(groups.values())
    random.Random(seed).shuffle(order)
    out: list[list[EpisodeResult]] = []
    for g in order:
        if out and len(out[-1]) + len(g) <= size:
            out[-1].extend(g)
        else:
            out.append(list(g))
    return out


def appendix_notes_of(value: Any) -> list[str]:
    """`appendix_notes` as a string, a list of strings or a list of {note|content}; anything else is []."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    notes = []
    for v in value:
        if isinstance(v, dict):
            v = v.get("note") or v.get("content") or ""
        if isinstance(v, str) and v.strip():
            notes.append(v.strip())
    return notes


class FailureKind(TypedDict, total=False):
    """One line of a failure analyst's `failure_summary`."""

    failure_type: str
    count: int
    description: str


class Analysis(TypedDict, total=False):
    """An analyst's reply as reflect.json keeps it: the model's keys in its order, then the stamps."""

    batch_size: int
    failure_summary: list[FailureKind]  # failure analysts
    success_patterns: list[str]  # success analysts
    patch: Patch
    appendix_notes: list[str]  # skill-aware reflection: execution-lapse notes
    source_type: str  # stamped: failure | success
    minibatch: int  # stamped: the minibatch's index within its kind
    minibatch_ids: list[str]  # stamped: the minibatch's task ids


@dataclass
class ReflectOutput:
    """reflect.json: the step's analyses and their patches, split by source."""

    analyses: list[Analysis] = field(default_factory=list)  # raw analyst JSON, stamped with source_type and minibatch
    failure_patches: list[Patch] = field(default_factory=list)
    success_patches: list[Patch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # skill-aware execution-lapse notes, in analysis order
    calls: int = 0
    dropped: int = 0  # minibatches whose reply stayed unusable after the re-ask (or whose call failed)
    errors: list[str] = field(default_factory=list)  # why: one line per dropped minibatch whose call raised

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @staticmethod
    def from_dict(d: Any) -> ReflectOutput:
        """reflect.json as read back (the memo's JSON)."""
        return ReflectOutput(**d)


def normalise(analyses: list[Analysis], mode: str) -> tuple[list[Patch], list[Patch]]:
    """The reference's normalisation: the inner patch of each analysis, stamped, split by source; empty
    payloads dropped."""
    key = prompts.PAYLOAD[mode][0]
    fails: list[Patch] = []
    wins: list[Patch] = []
    for a in analyses:
        inner = cast(Patch, a.get("patch", a))  # an analysis without a patch is read as its own patch
        items = inner.get(key) if isinstance(inner, dict) else None
        if not items or not isinstance(items, list):
            continue
        try:
            support = max(int(a.get("batch_size") or 0), 1)  # the analyst's own count (quirk: reported-support)
        except (TypeError, ValueError):
            support = 1
        for it in items:
            if isinstance(it, dict):
                it.setdefault("source_type", a.get("source_type", "failure"))
                it.setdefault("support_count", support)
        (wins if a.get("source_type") == "success" else fails).append(inner)
    return fails, wins


async def reflect(ctx: OptimizerContext, results: list[EpisodeResult]) -> ReflectOutput:
    """The step's analysts on its failure and success minibatches, in parallel; their patches normalised."""
    fail_mbs, win_mbs = split_minibatches(results, ctx.minibatch_size, ctx.batch_seed, ctx.failure_only)
    jobs = [("failure", i, mb) for i, mb in enumerate(fail_mbs)] + [("success", i, mb) for i, mb in enumerate(win_mbs)]
    out = ReflectOutput()
    done = await asyncio.gather(*(_analyse(ctx, out, *j) for j in jobs))
    # failures then successes, by minibatch index (fixes quirk: completion-order-patches)
    out.analyses = [d for d in done if d is not None]
    out.failure_patches, out.success_patches = normalise(out.analyses, ctx.mode)
    out.notes = [n for a in out.analyses for n in a.get("appendix_notes", [])]
    return out


def _writes_notes(ctx: OptimizerContext, kind: str) -> bool:
    """Skill-aware reflection: this analyst may also write execution-lapse notes for the appendix."""
    return (
        ctx.skill_aware
        and ctx.mode != "full_rewrite_minibatch"
        and (kind == "failure" or ctx.appendix_source != "failure_only")
    )


async def _analyse(
    ctx: OptimizerContext, out: ReflectOutput, kind: str, i: int, mb: list[EpisodeResult]
) -> Optional[Analysis]:
    """One analyst call on one minibatch; None when there was nothing to show or the reply was unusable."""
    mode = ctx.mode
    if not minibatch_text(mb):  # no conversation to show: no call
        return None
    notes = _writes_notes(ctx, kind)
    system = prompts.analyst_system(kind, mode, ctx.env, ctx.skill_aware, ctx.appendix_source)
    user = ctx.guard.analyst_user(
        mb,
        system,
        lambda t: prompts.analyst_user(  # the guard cuts only when it is on
            skill=ctx.skill,
            mode=mode,
            max_budget=ctx.max_budget,
            step_buffer=ctx.step_buffer,
            meta_skill=ctx.meta_skill,
            kind=kind,
            trajectories=t,
            k=len(mb),
        ),
    )
    out.calls += 1
    try:
        res = await ctx.llm.chat_json(
            ChatRequest("optimizer", "analyst", prompts.messages(system, user), f"{ctx.key}/analyst/{kind}{i}"),
            prompts.analyst_schema(kind, mode, notes),
            "analysis",
        )
    except MalformedOutput as e:  # also an endpoint out of retries: this minibatch yields nothing
        out.dropped += 1
        out.errors.append(f"{kind} minibatch {i}: {e.message}")
        return None
    return _analysis(ctx, out, cast(Analysis, dict(res.data)), kind, i, mb, notes)


def _analysis(
    ctx: OptimizerContext,
    out: ReflectOutput,
    d: Analysis,
    kind: str,
    i: int,
    mb: list[EpisodeResult],
    notes: bool,
) -> Optional[Analysis]:
    """An analyst's reply as the step keeps it: the patch capped at the budget, its source, its notes."""
    mode, payload_key = ctx.mode, prompts.PAYLOAD[ctx.mode][0]
    lapses = appendix_notes_of(d.get("appendix_notes")) if notes else []
    if "patch" not in d:
        if not (kind == "failure" and lapses):
            out.dropped += 1
            return None
        d["patch"] = Patch(reasoning="execution-lapse only")
        d["patch"][payload_key] = []
    patch = d["patch"]
    if mode != "full_rewrite_minibatch" and isinstance(patch, dict) and isinstance(patch.get(payload_key), list):
        # at most L, the configured maximum (quirk: analysts-told-max-budget)
        patch[payload_key] = patch[payload_key][: ctx.max_budget]
    d["source_type"], d["minibatch"], d["minibatch_ids"] = kind, i, [r.task_id for r in mb]
    if notes:
        d["appendix_notes"] = lapses
    else:  # notes from an analyst that may not emit them (failure_only source, skill-aware off) never reach the appendix
        d.pop("appendix_notes", None)
    return d
