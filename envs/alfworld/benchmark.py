"""ALFWorld: the target reads the skill, the task, recent history and admissible actions, and acts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from envs.alfworld import data as alf_data
from envs.alfworld.game import AlfWorldGame, task_text
from envs.alfworld.compile_cache import resolve_dir
from envs.base import LLM, Benchmark, DataError, EpisodeContext, EpisodeResult, Task, parse_options
from skillopt_ray.llm.types import ChatRequest

SEED_SKILL = """# ALFWorld household task skill

## Goal
Complete the household task described after "Your task is to:" using only admissible actions.

## How to act
- Reply with exactly one admissible action.
- Go to a receptacle before taking things from it or putting things in it.
"""

_ACTION_TAG = re.compile(r"<action>\s*(.*?)\s*</action>", re.DOTALL | re.IGNORECASE)


@dataclass
class AlfWorldOptions:
    skip_missing_games: bool = False
    sample_dir: Optional[str] = None  # where built-in sample games are generated
    cached_games: int = 32  # loaded games kept per env actor: replays skip the PDDL load (0 = off)
    # PDDL->SAS translations kept on disk across actors and runs: auto (~/.cache/skillopt_ray), off, or a directory
    compile_cache: str = "auto"

    @staticmethod
    def parse(raw: dict[str, Any]) -> "AlfWorldOptions":
        return parse_options(AlfWorldOptions, raw, "alfworld")


class GameCache:
    """Loaded games kept for reuse, so replaying a game (every gate replays the selection split)
    costs a reset, not a load. One instance serves one episode at a time."""

    def __init__(self, capacity: int, compile_cache_dir: Optional[Path] = None):
        self.capacity = capacity
        self.compile_cache_dir = compile_cache_dir
        self._free: dict[str, list[AlfWorldGame]] = {}
        self.loads = 0

    def acquire(self, gamefile: str) -> AlfWorldGame:
        free = self._free.get(gamefile)
        if free:
            return free.pop()
        self.loads += 1
        return AlfWorldGame(gamefile, self.compile_cache_dir)

    def release(self, game: AlfWorldGame) -> None:
        if sum(len(v) for v in self._free.values()) >= self.capacity:
            game.close()
            return
        self._free.setdefault(game.gamefile, []).append(game)


def action_schema(admissible: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"action": {"type": "string", "enum": admissible}},
        "required": ["action"],
        "additionalProperties": False,
    }


def parse_action(reply: str) -> Optional[str]:
    """An action from `<action>..</action>`, a JSON {"action": ...}, or a bare one-line reply."""
    m = _ACTION_TAG.search(reply or "")
    if m:
        return m.group(1).strip().splitlines()[0].strip() if m.group(1).strip() else None
    try:
        from skillopt_ray.llm.jsonout import extract_json

        obj = extract_json(reply)
        if isinstance(obj, dict) and isinstance(obj.get("action"), str):
            return obj["action"].strip()
    except ValueError:
        pass
    text = (reply or "").strip()
    if text and "\n" not in text and len(text) < 80:
        return text
    return None


def detect_loop(actions: list[str], window: int = 8) -> bool:
    recent = actions[-window:]
    if len(recent) < window:
        return False
    return len(set(recent)) <= 2


def build_messages(skill: str, task: str, history: list[tuple[str, str]], observation: str, admissible: list[str]) -> list[dict[str, str]]:
    system = (
        "You are an agent solving a household task in a text game. Read the skill below and follow it.\n\n"
        "=== SKILL ===\n" + skill.strip() + "\n=== END SKILL ==="
    )
    lines = [task or "(task in the first observation)", ""]
    if history:
        lines.append("Recent history (oldest first):")
        for act, obs in history:
            lines.append(f"> {act}\n{obs.strip()}")
        lines.append("")
    lines.append("Current observation:\n" + observation.strip())
    lines.append("")
    lines.append("Admissible actions:\n" + "\n".join(f"- {a}" for a in admissible))
    lines.append("")
    lines.append("Reply with your next action inside <action></action> tags, e.g. <action>look</action>.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]


class AlfWorldBenchmark(Benchmark):
    name = "alfworld"

    def __init__(self, env_cfg: dict[str, Any]):
        super().__init__(env_cfg)
        self.options = AlfWorldOptions.parse(dict(env_cfg.get("options") or {}))
        self._root = alf_data.resolve_root(env_cfg.get("data_dir"))
        self._games = GameCache(self.options.cached_games, resolve_dir(self.options.compile_cache))
        self._using_samples = self._root is None
        if self._using_samples:
            from envs.alfworld.samples import ensure_sample_games

            self._root = ensure_sample_games(self.options.sample_dir)

    def warm_up(self) -> None:
        """Importing and patching the engine takes about 0.6 CPU-s, and a process's first game
        another 0.1-0.2 s (text templates parsed, a planner library opened): paid here, once per
        actor, by one game's reset and a `look`."""
        from envs.alfworld.game import import_engine

        import_engine(self._games.compile_cache_dir)
        assert self._root is not None
        first = next(self._root.rglob("game.tw-pddl"), None)
        if first is None:
            return  # no games: load_split reports that clearly
        try:
            game = AlfWorldGame(first, self._games.compile_cache_dir)
            game.reset()
            game.step("look")
            game.close()
        except Exception:  # noqa: BLE001 - a broken game is reported by the episode that plays it
            pass

    def data_note(self) -> str:
        if self._using_samples:
            return f"ALFWorld: no data configured (env.data_dir / ALFWORLD_DATA) - using built-in sample games in {self._root}"
        return f"ALFWorld: games from {self._root}"

    def load_split(self, split: str) -> list[Task]:
        assert self._root is not None
        if self.env_cfg.get("manifest_dir"):
            return alf_data.manifest_split(self._root, self.env_cfg["manifest_dir"], split, self.options.skip_missing_games)
        return alf_data.walk_split(self._root, split)

    def seed_skill(self) -> str:
        return SEED_SKILL

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        gamefile = task.payload["gamefile"]
        if not Path(gamefile).is_file():
            return EpisodeResult(task.task_id, task.task_type, error=f"game file missing: {gamefile}", infra_error=True, fail_reason="infra_error")
        game = self._games.acquire(gamefile)
        try:
            return await self._play(game, task, skill, llm, ctx)
        finally:
            self._games.release(game)

    async def _play(self, game: AlfWorldGame, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        first = game.reset()
        goal = task_text(first.observation)
        observation, admissible = first.observation, first.admissible
        history: list[tuple[str, str]] = []
        trajectory: list[dict[str, Any]] = [{"observation": first.observation}]
        actions: list[str] = []
        invalid = 0
        won = False
        turns = 0
        for turn in range(ctx.max_turns):
            turns = turn + 1
            messages = build_messages(skill, goal, history[-ctx.history_window :] if ctx.history_window else [], observation, admissible)
            fmt = await llm.response_format_for("target", action_schema(admissible), "action") if admissible else None
            if fmt is not None and fmt.get("type") != "json_schema":
                fmt = None  # tags are the protocol; only a schema-constrained backend gets a schema
            reply = await llm.chat(ChatRequest("target", "rollout", messages, f"{ctx.key}/{task.task_id}/t{turn}", fmt))
            action = parse_action(reply.content)
            if action is None:
                invalid += 1
                obs_text = "Nothing happens. (No action found: reply with one admissible action in <action></action> tags.)"
                trajectory.append({"turn": turn, "reply": reply.content[:500], "action": None, "observation": obs_text, "valid": False})
                history.append(("(no action)", obs_text))
                observation = obs_text
                actions.append("")
                continue
            valid = action in admissible
            invalid += 0 if valid else 1
            out = game.step(action)
            actions.append(action)
            trajectory.append({"turn": turn, "action": action, "observation": out.observation, "valid": valid})
            history.append((action, out.observation))
            observation, admissible = out.observation, out.admissible or admissible
            if out.won:
                won = True
                break
            if out.done:
                break
        if won:
            reason = ""
        elif invalid > turns / 2:
            reason = "invalid_actions"
        elif detect_loop(actions):
            reason = "stuck_in_loop"
        else:
            reason = "max_steps_reached"
        score = 1.0 if won else 0.0
        return EpisodeResult(
            task.task_id, task.task_type, hard=score, soft=score, fail_reason=reason, n_turns=turns,
            trajectory=[{"goal": goal, "invalid_actions": invalid}] + trajectory,
        )
