"""Stage 1 — rollout: run a batch of tasks with the current skill, one result per task, in order."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Protocol

from skillopt_envs.base import EpisodeContext, EpisodeResult, Task


class InfraFailure(RuntimeError):
    """Too many episodes failed for infrastructure reasons to trust the scores."""


class EpisodeRunner(Protocol):
    async def run(self, tasks: list[Task], skill: str, ctx: EpisodeContext) -> list[EpisodeResult]: ...


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _means(rs: list[EpisodeResult]) -> tuple[float, float]:
    return (sum(r.hard for r in rs) / len(rs), sum(r.soft for r in rs) / len(rs)) if rs else (0.0, 0.0)


def summarize(results: list[EpisodeResult]) -> RolloutStats:
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
        tasks={r.task_id: [r.hard, r.soft] for r in ok},
    )


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
    results = await (runner.run(tasks, skill, ctx, stop=stop) if stop is not None else runner.run(tasks, skill, ctx))
    if len(results) != len(tasks) or any(r.task_id != t.task_id for r, t in zip(results, tasks)):
        raise InfraFailure(f"{what}: results do not line up with their tasks; this is a bug in the environment pool")
    check_infra(results, max_infra_fraction, what)
    return results
