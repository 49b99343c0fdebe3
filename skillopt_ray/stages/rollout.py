"""Stage 1 — rollout: run a batch of tasks with the current skill, one result per task, in order."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol

from envs.base import EpisodeContext, EpisodeResult, Task


class InfraFailure(RuntimeError):
    """Too many episodes failed for infrastructure reasons to trust the scores."""


class EpisodeRunner(Protocol):
    async def run(self, tasks: list[Task], skill: str, ctx: EpisodeContext) -> list[EpisodeResult]: ...


@dataclass
class RolloutStats:
    n: int = 0
    hard: float = 0.0
    soft: float = 0.0
    infra_errors: int = 0
    data_errors: int = 0
    per_type: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "hard": self.hard, "soft": self.soft, "infra_errors": self.infra_errors, "data_errors": self.data_errors, "per_type": self.per_type}


def summarize(results: list[EpisodeResult]) -> RolloutStats:
    """Means over all tasks; infra failures are counted, and score 0 only alongside that count."""
    n = len(results)
    if n == 0:
        return RolloutStats()
    by_type: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        by_type[r.task_type].append(r)
    per_type = {
        t: {"n": len(rs), "hard": sum(r.hard for r in rs) / len(rs), "soft": sum(r.soft for r in rs) / len(rs)}
        for t, rs in sorted(by_type.items())
    }
    return RolloutStats(
        n=n,
        hard=sum(r.hard for r in results) / n,
        soft=sum(r.soft for r in results) / n,
        infra_errors=sum(r.infra_error for r in results),
        data_errors=sum(r.data_error for r in results),
        per_type=per_type,
    )


def check_infra(results: list[EpisodeResult], max_fraction: float, what: str) -> None:
    bad = [r for r in results if r.infra_error]
    if results and len(bad) / len(results) > max_fraction:
        raise InfraFailure(
            f"{len(bad)} of {len(results)} {what} episodes failed for infrastructure reasons "
            f"(first: {bad[0].task_id}: {bad[0].error}); fix the environment or raise optimizer.max_infra_failure_fraction"
        )


async def rollout(runner: EpisodeRunner, tasks: list[Task], skill: str, ctx: EpisodeContext, max_infra_fraction: float, what: str) -> list[EpisodeResult]:
    results = await runner.run(tasks, skill, ctx)
    if len(results) != len(tasks) or any(r.task_id != t.task_id for r, t in zip(results, tasks)):
        raise InfraFailure(f"{what}: results do not line up with their tasks; this is a bug in the environment pool")
    check_infra(results, max_infra_fraction, what)
    return results
