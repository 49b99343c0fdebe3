"""Stage 1 — rollout: run a batch of tasks with the current skill, one result per task, in order."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional, Protocol, cast

from skillopt_envs.base import DataError, EpisodeContext, EpisodeResult, Task
from skillopt_envs.jsontypes import JSONObject


class InfraFailure(RuntimeError):
    """Too many episodes failed for infrastructure reasons to trust the scores."""


class EpisodeRunner(Protocol):
    async def run(
        self,
        tasks: list[Task],
        skill: str,
        ctx: EpisodeContext,
        stop: Optional[Callable[[EpisodeResult], bool]] = None,
    ) -> list[EpisodeResult]: ...


REPEAT_SEED_STRIDE = 7919  # repeat r of a batch plays with seed + r·stride: apart from the batch seeds (1000 apart)


@dataclass
class RolloutStats:
    """Means over the episodes that were scored: infra- and data-error episodes are counted beside the
    means, never inside them."""

    n: int = 0
    n_scored: int = 0
    hard: float = 0.0
    soft: float = 0.0
    infra_errors: int = 0
    infra_kinds: dict[str, int] = field(default_factory=dict)  # infra errors by kind (skillopt_envs.base.INFRA_KINDS)
    data_errors: int = 0
    not_played: int = 0
    per_type: dict[str, dict[str, float]] = field(default_factory=dict)
    tasks: dict[str, list[float]] = field(default_factory=dict)  # task_id -> [hard, soft], scored episodes only
    repeats: Optional[int] = None  # repeated rollouts only: episodes per task
    task_repeats: Optional[dict[str, list[list[float]]]] = None  # repeated rollouts: task_id -> each [hard, soft]

    def to_dict(self) -> JSONObject:
        d = asdict(self)
        if self.repeats is None:  # a single-rollout batch keeps the keys it always had
            d.pop("repeats")
            d.pop("task_repeats")
        return d


def _means(rs: list[EpisodeResult]) -> tuple[float, float]:
    return (sum(r.hard for r in rs) / len(rs), sum(r.soft for r in rs) / len(rs)) if rs else (0.0, 0.0)


def repeat_context(ctx: EpisodeContext, r: int) -> EpisodeContext:
    """The context of repeat r (0-based) of an episode: repeat 0 is the single rollout's own; a later repeat has
    its own sample key (so its target calls are fresh calls and fresh response-cache entries) and its own seed."""
    if r == 0:
        return ctx
    seed = None if ctx.seed is None else ctx.seed + REPEAT_SEED_STRIDE * r
    return replace(ctx, key=f"{ctx.key}/r{r}", seed=seed)


def summarize(results: list[EpisodeResult], repeats: int = 1) -> RolloutStats:
    """Scores of a batch. With repeated rollouts a task's entry in `tasks` is the mean of its scored repeats
    (`task_repeats` holds each); the overall means are over the scored episodes, which is the mean of the task
    means when every repeat was scored."""
    ok = [r for r in results if r.scored]
    by_type: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in ok:
        by_type[r.task_type].append(r)
    per_type = {t: {"n": len(rs), "hard": _means(rs)[0], "soft": _means(rs)[1]} for t, rs in sorted(by_type.items())}
    hard, soft = _means(ok)
    return RolloutStats(
        n=len(results),
        n_scored=len(ok),
        hard=hard,
        soft=soft,
        infra_errors=sum(r.infra_error for r in results),
        infra_kinds=dict(sorted(Counter(r.error_kind or "unknown" for r in results if r.infra_error).items())),
        data_errors=sum(r.data_error for r in results),
        not_played=sum(r.not_played for r in results),
        per_type=per_type,
        tasks={r.task_id: [r.hard, r.soft] for r in ok} if repeats == 1 else _task_means(ok),
        repeats=repeats if repeats > 1 else None,
        task_repeats=_task_repeats(ok) if repeats > 1 else None,
    )


def _task_repeats(ok: list[EpisodeResult]) -> dict[str, list[list[float]]]:
    out: dict[str, list[list[float]]] = {}
    for r in ok:
        out.setdefault(r.task_id, []).append([r.hard, r.soft])
    return out


def _task_means(ok: list[EpisodeResult]) -> dict[str, list[float]]:
    groups = _task_repeats(ok)
    return {t: [sum(x[0] for x in rs) / len(rs), sum(x[1] for x in rs) / len(rs)] for t, rs in groups.items()}


def check_infra(results: list[EpisodeResult], max_fraction: float, what: str) -> None:
    bad = [r for r in results if r.infra_error]
    if results and len(bad) / len(results) > max_fraction:
        fix = "fix the environment or raise optimizer.max_infra_failure_fraction"
        if all((r.error_kind or "").startswith("llm") for r in bad):  # the model endpoint, not the environment
            fix = (
                "check the model endpoint (or raise optimizer.max_infra_failure_fraction), then rerun the same command "
                "to resume"
            )
        raise InfraFailure(
            f"{len(bad)} of {len(results)} {what} episodes failed for infrastructure reasons "
            f"(first: {bad[0].task_id}: {bad[0].error}); {fix}"
        )


def check_data(results: list[EpisodeResult], max_fraction: float, what: str) -> None:
    """A split's evaluation whose tasks are mostly broken data has no score worth printing: DataError (the run
    stops, exit 2) past `max_fraction` of the episodes played, naming the first broken task and the fix."""
    played = [r for r in results if not r.not_played]
    bad = [r for r in played if r.data_error]
    if played and len(bad) / len(played) > max_fraction:
        scored = sum(r.scored for r in played)
        raise DataError(
            f"{len(bad)} of {len(played)} {what} episodes hit broken task data, so its score would rest on {scored} "
            f"(first: {bad[0].task_id}: {(bad[0].error or bad[0].fail_reason)[:300]}); fix those tasks, or raise "
            f"optimizer.max_data_error_fraction (now {max_fraction:g}) to score the rest"
        )


async def rollout(
    runner: EpisodeRunner,
    tasks: list[Task],
    skill: str,
    ctx: EpisodeContext,
    max_infra_fraction: float,
    what: str,
    stop: Optional[Callable[[EpisodeResult], bool]] = None,
) -> list[EpisodeResult]:
    """Run the batch; with `stop`, the runner may cancel the episodes left once it says the outcome is decided."""
    # runners without early stop (test doubles) are called without the keyword
    results = await (runner.run(tasks, skill, ctx, stop=stop) if stop is not None else runner.run(tasks, skill, ctx))
    if len(results) != len(tasks) or any(r.task_id != t.task_id for r, t in zip(results, tasks)):
        raise InfraFailure(f"{what}: results do not line up with their tasks; this is a bug in the environment pool")
    check_infra(results, max_infra_fraction, what)
    return results


async def rollout_repeats(
    runner: EpisodeRunner,
    tasks: list[Task],
    skill: str,
    ctx: EpisodeContext,
    repeats: int,
    max_infra_fraction: float,
    what: str,
    stop: Optional[Callable[[EpisodeResult], bool]] = None,
) -> list[EpisodeResult]:
    """`repeats` episodes of every task, each a distinct sample (`repeat_context`), played together; the results
    come task by task, a task's repeats side by side (the analysts see them together). One repeat is `rollout`."""
    if repeats == 1:
        return await rollout(runner, tasks, skill, ctx, max_infra_fraction, what, stop)
    expanded = [t for t in tasks for _ in range(repeats)]
    ctxs = [repeat_context(ctx, r) for _ in tasks for r in range(repeats)]
    pool = cast(Any, runner)  # a runner that plays repeats takes one context per task (the environment pool does)
    run = pool.run(expanded, skill, ctxs, stop=stop) if stop is not None else pool.run(expanded, skill, ctxs)
    results = await run
    if len(results) != len(expanded) or any(r.task_id != t.task_id for r, t in zip(results, expanded)):
        raise InfraFailure(f"{what}: results do not line up with their tasks; this is a bug in the environment pool")
    for i, r in enumerate(results):
        r.info = {**(r.info or {}), "repeat": i % repeats + 1, "repeats": repeats}
    check_infra(results, max_infra_fraction, what)
    return results
