"""A synthetic benchmark for tests and benchmarks only (no `+experiment=`, not listed by `skillopt_envs.names()`).

Each episode makes `options.calls` target calls and nothing else, so what a run measures is the
runner itself: the env-actor pool, the gateway, the endpoint. A reply that names the episode's own
task id scores 1 (a server that echoes the `X-Skillopt-Key` header, say), so a result that reached
the wrong task shows up as a 0.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from skillopt_envs.base import (
    LLM,
    Benchmark,
    DataError,
    EnvSettings,
    EpisodeContext,
    EpisodeResult,
    Task,
    parse_options,
)
from skillopt_envs.chat import ChatMessage
from skillopt_envs.kit import chat

SPLITS = {"train": 0, "val": 1, "valid_seen": 1, "selection": 1, "test": 2, "valid_unseen": 2}


@dataclass
class SyntheticOptions:
    tasks: int = 16  # per split
    calls: int = 1  # target calls per episode
    prompt_chars: int = 200
    think_s: float = 0.0  # environment-side wait between calls (holds an episode in flight without CPU)
    raise_error: str = (
        ""  # tests: every episode raises; "sandbox_start" a SandboxStartError, anything else a RuntimeError
    )


class SyntheticBenchmark(Benchmark):
    name = "synthetic"
    options_class = SyntheticOptions

    def __init__(self, env_cfg: EnvSettings):
        super().__init__(env_cfg)
        self.options = parse_options(SyntheticOptions, dict(env_cfg.get("options") or {}), "synthetic")
        if self.options.tasks < 1 or self.options.calls < 1:
            raise DataError("env.options.tasks and env.options.calls must be >= 1 for the synthetic benchmark")

    def load_split(self, split: str) -> list[Task]:
        if split == "all":
            return [t for s in ("train", "val", "test") for t in self.load_split(s)]
        if split not in SPLITS:
            raise DataError(f"synthetic benchmark: unknown split {split!r}")
        k = SPLITS[split]
        return [Task(f"syn{k}-{i:05d}", "synthetic", {"n": i}) for i in range(self.options.tasks)]

    def seed_skill(self) -> str:
        return "# Skill: synthetic\n\nNothing yet.\n"

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        if self.options.raise_error == "sandbox_start":
            from skillopt_envs.sandbox import SandboxStartError

            raise SandboxStartError("the sandbox could not start (synthetic)")
        if self.options.raise_error:
            raise RuntimeError(f"synthetic failure: {self.options.raise_error}")
        filler = "x" * self.options.prompt_chars
        hits, replies = 0, []
        for turn in range(self.options.calls):
            if turn and self.options.think_s:
                await asyncio.sleep(self.options.think_s)
            messages: list[ChatMessage] = [
                {"role": "system", "content": skill},
                {"role": "user", "content": f"{task.task_id} {filler}"},
            ]
            reply = await chat(llm, messages, f"{ctx.key}/{task.task_id}/t{turn}", stage=ctx.stage)
            hits += task.task_id in reply
            replies.append(reply)
        hard = float(hits == self.options.calls)
        return EpisodeResult(
            task.task_id,
            task.task_type,
            hard=hard,
            soft=hits / self.options.calls,
            fail_reason="" if hard else "reply did not name the task",
            n_turns=self.options.calls,
            trajectory=[{"type": "message", "turn": i + 1, "content": c} for i, c in enumerate(replies)],
        )
