"""A pool of Ray actors hosting environment instances.

Episodes run concurrently and independently (no lock-step): each takes a free
slot, so one slow episode never holds the others. Dead or hung actors are
replaced and their episodes re-run; after the retries an episode is reported
as an infrastructure failure, never as a lost game.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Optional

import ray
from ray.exceptions import GetTimeoutError, RayActorError

import envs
from envs.base import EpisodeContext, EpisodeResult, Task
from skillopt_ray.llm.gateway import LLMHandle
from skillopt_ray.llm.types import LLMError


@ray.remote
class EnvActor:
    def __init__(self, env_name: str, env_cfg: dict[str, Any], gateway: Any, owners: Optional[list[dict[str, Any]]] = None):
        from skillopt_ray.lifeline import watch

        watch(list(owners or []), "env actor")  # the owner (CLI, driver) gone: stop before starting another episode
        self.bench = envs.make(env_name, env_cfg)
        self.bench.warm_up()
        self.llm = LLMHandle(gateway)

    async def run(self, task: Task, skill: str, ctx: EpisodeContext) -> dict[str, Any]:
        result = await self.bench.run_episode(task, skill, self.llm, ctx)
        return result.to_dict()

    def pid(self) -> int:
        return os.getpid()

    def memory_mb(self) -> float:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Slots:
    """Free episode slots per actor. A task returns to the actor that last ran it when that actor
    has a free slot (its game is still loaded there: a replay costs a reset, not a load);
    otherwise it takes the actor with the most free slots. Never waits for a busy favourite."""

    def __init__(self, actors: int, per_actor: int):
        self.free = [per_actor] * actors
        self._cond = asyncio.Condition()

    async def take(self, preferred: Optional[int]) -> int:
        async with self._cond:
            await self._cond.wait_for(lambda: any(self.free))
            if preferred is not None and preferred < len(self.free) and self.free[preferred] > 0:
                idx = preferred
            else:
                idx = max(range(len(self.free)), key=lambda i: self.free[i])
            self.free[idx] -= 1
            return idx

    async def give(self, idx: int) -> None:
        async with self._cond:
            self.free[idx] += 1
            self._cond.notify()


@dataclass
class PoolSettings:
    actors: int
    episodes_per_actor: int
    actor_num_cpus: float
    episode_timeout_s: float
    episode_retries: int


class EnvPool:
    def __init__(self, env_name: str, env_cfg: dict[str, Any], gateway: Any, settings: PoolSettings,
                 owners: Optional[list[dict[str, Any]]] = None):
        self.owners = list(owners or [])
        self.env_name = env_name
        self.env_cfg = env_cfg
        self.gateway = gateway
        self.s = settings
        self.actors: list[Any] = [self._spawn() for _ in range(settings.actors)]
        self.generation = [0] * settings.actors
        self.replaced = 0
        self.retried_episodes = 0
        self._slots: Optional[Slots] = None
        self.home: dict[str, int] = {}  # task_id -> actor that last ran it (cache affinity)
        self.affinity_hits = 0
        self._slots_loop: Optional[asyncio.AbstractEventLoop] = None
        self.episodes_done = 0
        self.episodes_total = 0

    def _spawn(self) -> Any:
        return EnvActor.options(num_cpus=self.s.actor_num_cpus, max_concurrency=self.s.episodes_per_actor).remote(
            self.env_name, self.env_cfg, self.gateway, self.owners
        )

    def _slot_pool(self) -> Slots:
        """Free slots, bound to the running event loop."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots_loop = loop
            self._slots = Slots(len(self.actors), self.s.episodes_per_actor)
        return self._slots

    def _replace(self, idx: int, gen: int) -> None:
        if self.generation[idx] != gen:
            return  # another episode already replaced this actor
        try:
            ray.kill(self.actors[idx], no_restart=True)
        except Exception:  # noqa: BLE001 - it may already be dead
            pass
        self.actors[idx] = self._spawn()
        self.generation[idx] += 1
        self.replaced += 1

    async def _run_one(self, task: Task, skill: str, ctx: EpisodeContext) -> EpisodeResult:
        slots = self._slot_pool()
        last_error = ""
        for attempt in range(self.s.episode_retries + 1):
            if attempt:
                self.retried_episodes += 1
            preferred = self.home.get(task.task_id)
            idx = await slots.take(preferred)
            self.affinity_hits += preferred == idx
            gen = self.generation[idx]
            try:
                ref = self.actors[idx].run.remote(task, skill, ctx)
                data = await asyncio.wait_for(ref, timeout=self.s.episode_timeout_s)
                self.home[task.task_id] = idx
                return EpisodeResult.from_dict(data)
            except LLMError as e:
                if e.fatal:
                    raise  # endpoint down, budget, replay miss: the run must stop, not score zero
                last_error = f"llm: {e}"
            except (asyncio.TimeoutError, GetTimeoutError):
                last_error = f"episode timed out after {self.s.episode_timeout_s:.0f}s (actor replaced)"
                self._replace(idx, gen)
            except RayActorError as e:
                last_error = f"environment actor died: {str(e).splitlines()[0][:200]}"
                self._replace(idx, gen)
            except Exception as e:  # noqa: BLE001 - environment code failed; retried, then reported
                last_error = f"{type(e).__name__}: {str(e).splitlines()[-1][:300] if str(e) else ''}"
            finally:
                await slots.give(idx)
        return EpisodeResult(task.task_id, task.task_type, error=last_error, infra_error=True, fail_reason="infra_error")

    async def run(self, tasks: list[Task], skill: str, ctx: EpisodeContext) -> list[EpisodeResult]:
        """One result per task, in task order."""
        self.episodes_total = len(tasks)
        self.episodes_done = 0

        async def counted(t: Task) -> EpisodeResult:
            r = await self._run_one(t, skill, ctx)
            self.episodes_done += 1
            return r

        return list(await asyncio.gather(*(counted(t) for t in tasks)))

    async def actor_pids(self) -> list[int]:
        return list(await asyncio.gather(*(a.pid.remote() for a in self.actors)))

    async def memory_mb(self) -> list[float]:
        return list(await asyncio.gather(*(a.memory_mb.remote() for a in self.actors)))

    def shutdown(self) -> None:
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
