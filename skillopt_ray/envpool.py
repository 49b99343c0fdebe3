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
    def __init__(self, env_name: str, env_cfg: dict[str, Any], gateway: Any):
        self.bench = envs.make(env_name, env_cfg)
        self.llm = LLMHandle(gateway)

    async def run(self, task: Task, skill: str, ctx: EpisodeContext) -> dict[str, Any]:
        result = await self.bench.run_episode(task, skill, self.llm, ctx)
        return result.to_dict()

    def pid(self) -> int:
        return os.getpid()

    def memory_mb(self) -> float:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@dataclass
class PoolSettings:
    actors: int
    episodes_per_actor: int
    actor_num_cpus: float
    episode_timeout_s: float
    episode_retries: int


class EnvPool:
    def __init__(self, env_name: str, env_cfg: dict[str, Any], gateway: Any, settings: PoolSettings):
        self.env_name = env_name
        self.env_cfg = env_cfg
        self.gateway = gateway
        self.s = settings
        self.actors: list[Any] = [self._spawn() for _ in range(settings.actors)]
        self.generation = [0] * settings.actors
        self.replaced = 0
        self.retried_episodes = 0
        self._slots: Optional[asyncio.Queue[int]] = None
        self._slots_loop: Optional[asyncio.AbstractEventLoop] = None
        self.episodes_done = 0
        self.episodes_total = 0

    def _spawn(self) -> Any:
        return EnvActor.options(num_cpus=self.s.actor_num_cpus, max_concurrency=self.s.episodes_per_actor).remote(
            self.env_name, self.env_cfg, self.gateway
        )

    def _queue(self) -> asyncio.Queue[int]:
        """Free slots (one entry per episode an actor may run), bound to the running event loop."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots_loop = loop
            self._slots = asyncio.Queue()
            for _ in range(self.s.episodes_per_actor):
                for i in range(len(self.actors)):
                    self._slots.put_nowait(i)
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
        slots = self._queue()
        last_error = ""
        for attempt in range(self.s.episode_retries + 1):
            if attempt:
                self.retried_episodes += 1
            idx = await slots.get()
            gen = self.generation[idx]
            try:
                ref = self.actors[idx].run.remote(task, skill, ctx)
                data = await asyncio.wait_for(ref, timeout=self.s.episode_timeout_s)
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
                slots.put_nowait(idx)
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
