"""Helpers shared by test files; fixtures live in conftest.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import skillopt_envs
from skillopt_envs.base import EpisodeContext


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def bench(data: Path, **options: Any) -> Any:
    return skillopt_envs.make("custom", {"name": "custom", "data_dir": str(data), "options": options})


class FakeLLM:
    """Answers every target call with `reply`; records the messages it was sent."""

    def __init__(self, reply: str):
        self.reply = reply
        self.sent: list[Any] = []

    async def chat(self, req: Any) -> Reply:
        self.sent.append(req)
        return Reply(self.reply)


CTX = EpisodeContext("t/e1", True, 1, 0)


def play(b: Any, split: str, llm: FakeLLM, skill: str = "# Skill\nRULE-1") -> Any:
    task = b.load_split(split)[0]
    return asyncio.run(b.run_episode(task, skill, llm, CTX))


class Reply:
    def __init__(self, content: str):
        self.content = content
