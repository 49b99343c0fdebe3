"""ALFWorld: the reference's episode protocol on the real engine.

Each step the target gets the skill, the task, the two most recent steps and the admissible actions
(envs/alfworld/protocol.py) and replies with reasoning and one action; the lowercased action is played.
Splits: SkillOpt's paper split ships with the project (envs/alfworld/splits) and is the default on real data.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.alfworld import data as alf_data
from skillopt_envs.alfworld.compile_cache import resolve_dir
from skillopt_envs.alfworld.game import AlfWorldGame, StepOutcome, read_walkthrough
from skillopt_envs.alfworld.openings import Opening, Openings
from skillopt_envs.alfworld.protocol import (
    ParsedReply,
    Record,
    action_schema,
    build_messages,
    goal_text,
    parse_constrained_reply,
    parse_reply,
)
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
from skillopt_envs.chat import ResponseFormat
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import ChatRequest, check_choice, missing_counts

SEED_SKILL_PATH = Path(__file__).resolve().parent / "seed_skill.md"
SEED_SKILL = SEED_SKILL_PATH.read_text(encoding="utf-8")

FAIL_NOT_COMPLETED = "Episode ended without completing the task"

logger = logging.getLogger(__name__)


def fail_timeout(max_steps: int) -> str:
    return f"Timeout after {max_steps} steps"


@dataclass
class AlfWorldOptions:
    skip_missing_games: bool = (
        False  # games a manifest lists but the data lacks: skipped (true) or a clear error (false)
    )
    # which games make the splits on real data: `paper` (SkillOpt's 39/18/134 split, shipped) or `folders` (every game
    # under json_2.1.1/<split>/); env.manifest_dir, when set, wins over both. Sample games always use their folders.
    split_source: str = "paper"
    # the engine's own move limit: the reference's TextWorld env sets `done` on the 50th action
    # (quirk: textworld-move-limit); 0 = none
    engine_step_limit: int = 50
    # constrain the target's reply to a JSON enum of the admissible actions: auto (only for the embedded llama.cpp
    # model, provider "embedded"), on, off
    constrained_actions: str = "auto"
    target_provider: Optional[str] = None  # filled from llm.target.provider by conf/env/alfworld.yaml
    sample_dir: Optional[str] = None  # where built-in sample games are generated
    cached_games: int = 32  # loaded games kept per env actor: replays skip the PDDL load (0 = off)
    # PDDL->SAS translations kept on disk across actors and runs: auto (~/.cache/skillopt_ray), off, or a directory
    compile_cache: str = "auto"

    @staticmethod
    def parse(raw: JSONObject) -> AlfWorldOptions:
        opts = parse_options(AlfWorldOptions, raw, "alfworld")
        check_choice(opts, "split_source", ("paper", "folders"))
        check_choice(opts, "constrained_actions", ("auto", "on", "off"))
        if opts.engine_step_limit < 0:
            raise DataError("env.options.engine_step_limit must be >= 0 (0 = no engine limit)")
        return opts

    @property
    def constrained(self) -> bool:
        if self.constrained_actions == "auto":
            return self.target_provider == "embedded"
        return self.constrained_actions == "on"


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


@dataclass(frozen=True)
class Turn:
    """What every target call of one episode shares."""

    skill: str
    llm: LLM
    ctx: EpisodeContext
    ref: str  # the game's name in sample keys

    @property
    def window(self) -> int:
        return self.ctx.history_window


@dataclass(frozen=True)
class View:
    """What the target is shown at a step: the goal, the history so far, the observation and the admissible actions."""

    goal: str
    memory: list[Record]
    observation: str
    admissible: list[str]


def _first_view(opening: Opening) -> View:
    return View(goal_text(opening.observation), [], opening.observation, list(opening.admissible))


async def _let_requests_leave() -> None:
    """A short pause, so a call just made leaves before a game load holds this event loop: the gateway transport
    sends a process's calls in batches, holding a new call a couple of milliseconds while others are out so that
    calls made close together share one batch."""
    await asyncio.sleep(0.005)


def _discard(call: Optional[asyncio.Future[Any]]) -> None:
    """An early first call the episode did not use (its game failed to load): stopped, its outcome dropped."""
    if call is None:
        return
    if not call.done():
        call.cancel()
    elif not call.cancelled():
        call.exception()  # retrieved, so asyncio does not report an unread failure


def _walkthrough_length(task: Task) -> Optional[int]:
    """Steps of the game's walkthrough, None when the game file carries none (or cannot be read)."""
    try:
        walk = read_walkthrough(task.payload["gamefile"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return len(walk) or None


def parse_action(reply: str) -> str:
    """The command a tagged reply plays (`look` when it has none); see protocol.parse_reply."""
    return parse_reply(reply).command


def _episode_result(
    task: Task,
    goal: str,
    ref: str,
    won: bool,
    done: bool,
    trajectory: list[JSONObject],
    format_errors: int,
    max_turns: int,
) -> EpisodeResult:
    """The played episode as a result: won scores 1, else the game ended (not completed) or the turns ran out."""
    if won:
        reason = ""
    elif done:
        reason = FAIL_NOT_COMPLETED
    else:
        reason = fail_timeout(max_turns)
    score = 1.0 if won else 0.0
    return EpisodeResult(
        task.task_id,
        task.task_type,
        hard=score,
        soft=score,
        fail_reason=reason,
        n_turns=len(trajectory),
        trajectory=trajectory,
        task_description=goal,
        info={"gamefile": ref, "format_errors": format_errors},
    )


class AlfWorldBenchmark(Benchmark):
    name = "alfworld"
    options_class = AlfWorldOptions
    # a game's steps run Python on the CPU (Ray's env actors play games in parallel processes), and TextWorld's engine
    # is not thread-safe: games on threads of one process failed (a KeyError in its state, a segfault)
    one_process = False

    def __init__(self, env_cfg: EnvSettings):
        super().__init__(env_cfg)
        self.options = AlfWorldOptions.parse(dict(env_cfg.get("options") or {}))
        self._root = alf_data.resolve_root(env_cfg.get("data_dir"))
        self._games = GameCache(self.options.cached_games, resolve_dir(self.options.compile_cache))
        self._openings = Openings.open(self._games.compile_cache_dir)
        self._warming: Optional[threading.Thread] = None  # start_warm_up's thread
        self._using_samples = self._root is None
        if self._using_samples:
            from skillopt_envs.alfworld.samples import ensure_sample_games

            self._root = ensure_sample_games(self.options.sample_dir)

    def start_warm_up(self) -> None:
        """The warm-up in a thread: an actor's first episodes send their first calls from kept openings meanwhile
        (about 1 s sooner on 2 cores); each waits for it before it loads a game (`_engine_ready`), so the engine is
        never used from two threads at once."""
        self._warming = threading.Thread(target=self.warm_up, name="alfworld-warm-up", daemon=True)
        self._warming.start()

    async def _engine_ready(self) -> None:
        if self._warming is not None and self._warming.is_alive():
            await asyncio.to_thread(self._warming.join)

    def warm_up(self) -> None:
        """Importing and patching the engine takes about 0.6 CPU-s, and a process's first game
        another 0.1-0.2 s (text templates parsed, a planner library opened): paid here, once per
        actor, by one game's reset and a `look`."""
        from skillopt_envs.alfworld.game import import_engine

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

    def _manifest_dir(self) -> Optional[Path]:
        """The manifests that define the splits: env.manifest_dir, else the shipped paper split on real data;
        None = every game under the split folders (sample games, or split_source=folders)."""
        if manifests := self.env_cfg.get("manifest_dir"):
            return Path(manifests).expanduser()
        if self._using_samples or self.options.split_source == "folders":
            return None
        return alf_data.PAPER_SPLIT_DIR

    def data_note(self) -> str:
        if self._using_samples:
            return f"ALFWorld: no data configured (env.data_dir / ALFWORLD_DATA) - using built-in sample games in {self._root}"
        assert self._root is not None
        manifests = self._manifest_dir()
        if manifests is None:
            return f"ALFWorld: games from {self._root}, every game under its split folders (env.options.split_source=folders), not the paper split"
        paper = manifests == alf_data.PAPER_SPLIT_DIR
        which = "SkillOpt's paper split (shipped)" if paper else f"split manifests {manifests}"
        note = f"ALFWorld: games from {self._root}; {which}"
        presence = alf_data.manifest_presence(self._root, manifests)
        sizes = "/".join(str(p.present) for p in presence)
        missing = [p for p in presence if p.present < p.listed]
        if paper and not missing:
            return note + f", {sizes} train/val/test games as in the paper"
        if not missing:
            return note + f", {sizes} train/val/test games"
        listed, gone = missing_counts(presence)
        action = (
            "they are skipped (env.options.skip_missing_games=true)"
            if self.options.skip_missing_games
            else "the run stops: download them or set env.options.skip_missing_games=true"
        )
        differs = "; split sizes differ from the paper's" if paper else ""
        return (
            note
            + f": only {sizes} of its {listed} train/val/test games are in the data ({gone} missing) - {action}{differs}"
        )

    def turns_note(self, splits: dict[str, list[Task]], max_turns: int) -> str:
        """Games whose walkthrough (the shortest known win, carried by the game file) is longer than max_turns can
        never be won, whatever the target does: say so, per split, with the setting that fixes it."""
        short: list[str] = []
        need = 0
        for name, tasks in splits.items():
            lengths = [n for n in (_walkthrough_length(t) for t in tasks) if n is not None]
            over = [n for n in lengths if n > max_turns]
            if over:
                need = max(need, *over)
                what = "none" if len(over) == len(lengths) else f"{len(lengths) - len(over)} of {len(lengths)}"
                short.append(f"{name}: {what} winnable (shortest walkthrough {min(lengths)} steps)")
        if not short:
            return ""
        return (
            f"ALFWorld: env.max_turns={max_turns} is below the walkthrough of some games, which no target can then "
            f"win ({'; '.join(short)}); set env.max_turns={need} or more"
        )

    def load_split(self, split: str) -> list[Task]:
        assert self._root is not None
        manifests = self._manifest_dir()
        if manifests is not None:
            return alf_data.manifest_split(self._root, manifests, split, self.options.skip_missing_games)
        return alf_data.walk_split(self._root, split)

    def seed_skill(self) -> str:
        return SEED_SKILL

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        gamefile = task.payload["gamefile"]
        if not Path(gamefile).is_file():
            return EpisodeResult(
                task.task_id,
                task.task_type,
                error=f"game file missing: {gamefile}",
                infra_error=True,
                fail_reason="infra_error",
                error_kind="game_missing",
            )
        ref = task.payload.get("game_ref") or alf_data.game_ref(gamefile)
        turn = Turn(skill, llm, ctx, ref)
        known = self._openings.get(gamefile)
        # the opening is known: the first call leaves now and the game loads while the model answers
        early = asyncio.ensure_future(self._ask(turn, 0, _first_view(known))) if known is not None else None
        if early is not None:
            await _let_requests_leave()
        game: Optional[AlfWorldGame] = None
        try:
            await self._engine_ready()
            game = self._games.acquire(gamefile)
            first = game.reset()
            seen = Opening(first.observation, tuple(first.admissible))
            if seen != known:
                self._openings.put(gamefile, seen)
                if early is not None:  # a stale kept opening: ask again with what the game showed
                    logger.warning("ALFWorld: the kept opening of %s differed from its reset; asked again", ref)
                    early.cancel()
                    early = None
            return await self._play(game, first, task, turn, early)
        finally:
            _discard(early)
            if game is not None:
                self._games.release(game)

    async def _ask(self, turn: Turn, step: int, view: View) -> tuple[str, bool]:
        """One target call for the view: (the reply's text, whether it was schema-constrained)."""
        messages = build_messages(turn.skill, view.goal, view.memory, view.observation, view.admissible, turn.window)
        fmt = await self._action_format(turn.llm, view.admissible)
        key = f"{turn.ctx.key}/{turn.ref}/t{step}"
        reply = await turn.llm.chat(ChatRequest("target", turn.ctx.stage or "rollout", messages, key, fmt))
        return reply.content, fmt is not None

    async def _play(
        self,
        game: AlfWorldGame,
        first: StepOutcome,
        task: Task,
        turn: Turn,
        early: Optional[asyncio.Future[tuple[str, bool]]],
    ) -> EpisodeResult:
        """One episode as the reference plays it: at most max_turns target calls, each reply's action played;
        an LLM error propagates (the pool reports an infra error), it never becomes an action. `early`: the first
        call, already asked with this opening."""
        goal = goal_text(first.observation)
        view = View(goal, [], first.observation, first.admissible)
        trajectory: list[JSONObject] = []
        won = done = False
        format_errors = 0
        for step in range(turn.ctx.max_turns):
            content, constrained = await (early if step == 0 and early is not None else self._ask(turn, step, view))
            parsed: ParsedReply = parse_constrained_reply(content) if constrained else parse_reply(content)
            format_errors += 0 if parsed.format_ok else 1
            out = game.step(parsed.command)
            won = out.won
            done = (
                out.done
                or out.won
                or (self.options.engine_step_limit > 0 and step + 1 >= self.options.engine_step_limit)
            )
            trajectory.append(
                {
                    "step": step,
                    "action": parsed.action,
                    "reasoning": parsed.reasoning,
                    "model_response": content,
                    "env_feedback": out.observation,
                    "reward": 1.0 if out.won else 0.0,
                    "done": done,
                    "format_ok": parsed.format_ok,
                }
            )
            view = View(
                goal,
                [*view.memory, Record(view.observation, parsed.command)],
                out.observation,
                out.admissible or view.admissible,
            )
            if done:
                break
        return _episode_result(task, goal, turn.ref, won, done, trajectory, format_errors, turn.ctx.max_turns)

    async def _action_format(self, llm: LLM, admissible: list[str]) -> Optional[ResponseFormat]:
        """The JSON schema that limits the reply's action to the admissible commands (constrained mode), or None."""
        if not (self.options.constrained and admissible):
            return None
        fmt = await llm.response_format_for("target", action_schema(admissible), "action")
        if fmt is not None and fmt.get("type") != "json_schema":
            return None  # an enum needs a JSON schema; a bare json_object mode would only break the tags
        return fmt
