"""The rollout window: episodes start longest first by their benchmark's guess before they were ever played, and an
ALFWorld episode whose game opening is kept asks its first model call before loading the game, with the same
prompts, moves and scores as one that loads first."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import llm_config
from skillopt_envs.alfworld import benchmark as alf_benchmark
from skillopt_envs.alfworld.benchmark import AlfWorldBenchmark
from skillopt_envs.alfworld.data import manifest_split, walk_split
from skillopt_envs.alfworld.game import AlfWorldGame, read_walkthrough
from skillopt_envs.alfworld.openings import Opening, Openings
from skillopt_envs.base import EpisodeContext, Task
from skillopt_envs.chat import ChatResult

from skillopt_ray.engine.envpool import start_order

# ---------------------------------------------------------------- start order


def _task(task_id: str, payload: dict[str, Any]) -> Task:
    return Task(task_id, "t", payload)


def test_unplayed_tasks_start_longest_first_by_their_guess():
    tasks = [_task(i, {"expected_turns": n}) for i, n in (("a", 4), ("b", 9), ("c", 6), ("d", 9))]
    assert start_order(tasks, {}) == [1, 3, 2, 0]  # guesses 9, 9, 6, 4; ties keep the tasks' order


def test_turns_played_win_over_the_guess_and_bad_guesses_are_ignored():
    tasks = [
        _task("a", {"expected_turns": 20}),
        _task("b", {"expected_turns": 2}),
        _task("c", {"expected_turns": True}),  # not a number of turns: no guess, counts as the mean
        _task("d", {"expected_turns": -5}),
    ]
    # a took 3 when played (not its guess of 20); known: a 3, b 2 -> mean 2.5 for c and d
    assert start_order(tasks, {"a": 3}) == [0, 2, 3, 1]
    assert start_order([_task(i, {"expected_turns": "7"}) for i in "xyz"], {}) == [0, 1, 2]  # none usable


# ---------------------------------------------------------------- ALFWorld guesses


def test_alfworld_tasks_carry_their_walkthrough_length(alfworld_root):
    tasks = walk_split(alfworld_root, "train")
    assert tasks and all(t.payload["expected_turns"] == len(read_walkthrough(t.payload["gamefile"])) for t in tasks)
    assert len({t.payload["expected_turns"] for t in tasks}) > 1  # lengths differ, so the order means something


def test_a_game_without_a_walkthrough_has_no_guess(alfworld_root, tmp_path):
    src = walk_split(alfworld_root, "train")[0].payload["gamefile"]
    game = tmp_path / "json_2.1.1" / "train" / "pick_and_place_simple-X-None-Y-1" / "trial_1" / "game.tw-pddl"
    game.parent.mkdir(parents=True)
    data = json.loads(Path(src).read_text())
    data.pop("walkthrough", None)
    game.write_text(json.dumps(data))
    manifests = tmp_path / "m"
    for name in ("train", "val", "test"):
        (manifests / name).mkdir(parents=True)
        (manifests / name / "items.json").write_text(
            json.dumps(
                [{"id": "g1", "gamefile": "json_2.1.1/train/pick_and_place_simple-X-None-Y-1/trial_1/game.tw-pddl"}]
            )
        )
    (task,) = manifest_split(tmp_path, manifests, "train", skip_missing=False)
    assert "expected_turns" not in task.payload and task.payload["gamefile"] == str(game)


# ---------------------------------------------------------------- early first call


@dataclass
class WalkLLM:
    """An in-process target that replays a walkthrough and notes, per call, how many games had been loaded."""

    walk: list[str]
    loads: list[int]  # shared with the patched game loader: one entry per load
    calls: list[tuple[str, int, str]] = field(default_factory=list)  # (key, games loaded when asked, user prompt)

    async def chat(self, req: Any) -> ChatResult:
        self.calls.append((req.key, len(self.loads), req.messages[1]["content"]))
        await asyncio.sleep(0.05)  # the model thinks; a game load may run meanwhile
        step = int(req.key.rsplit("/t", 1)[1])
        return ChatResult(f"<think>step {step}</think><action>{self.walk[step]}</action>")

    async def chat_json(self, req: Any, schema: Any, name: str = "reply") -> Any:
        raise AssertionError("ALFWorld episodes never ask for JSON")

    async def response_format_for(self, role: str, schema: dict, name: str) -> Any:
        return None


@pytest.fixture()
def counted_loads(monkeypatch) -> list[int]:
    loads: list[int] = []
    real_init = AlfWorldGame.__init__

    def init(self, gamefile, compile_cache_dir=None):
        real_init(self, gamefile, compile_cache_dir)
        loads.append(1)

    monkeypatch.setattr(alf_benchmark.AlfWorldGame, "__init__", init)
    return loads


def _play(bench: AlfWorldBenchmark, task: Task, llm: WalkLLM, key: str):
    return asyncio.run(bench.run_episode(task, "# skill", llm, EpisodeContext(key, False, 50, 2)))


def _same_play(a, b) -> bool:
    keep = ("action", "model_response", "env_feedback", "reward", "done", "format_ok")
    return (a.hard, a.n_turns, a.fail_reason) == (b.hard, b.n_turns, b.fail_reason) and [
        {k: s[k] for k in keep} for s in a.trajectory
    ] == [{k: s[k] for k in keep} for s in b.trajectory]


def test_a_kept_opening_sends_the_first_call_before_the_game_loads(alfworld_root, tmp_path, counted_loads):
    task = walk_split(alfworld_root, "train")[0]
    walk = read_walkthrough(task.payload["gamefile"])
    options = {"compile_cache": str(tmp_path / "cc"), "cached_games": 0}
    first = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": options})
    cold = WalkLLM(walk, counted_loads)
    r1 = _play(first, task, cold, "cold")
    assert cold.calls[0][1] == 1  # nothing kept yet: the game loaded before the first call
    # another actor (a fresh benchmark on the same compile cache) finds the opening on disk
    counted_loads.clear()
    second = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": options})
    warm = WalkLLM(walk, counted_loads)
    r2 = _play(second, task, warm, "warm")
    assert warm.calls[0][1] == 0 and warm.calls[1][1] == 1  # asked first, loaded while the model answered
    assert r1.hard == r2.hard == 1.0 and _same_play(r1, r2)
    assert [c[2] for c in cold.calls] == [c[2] for c in warm.calls]  # the model saw the very same prompts


def test_a_stale_kept_opening_is_replaced_and_the_first_call_asked_again(alfworld_root, tmp_path, counted_loads):
    task = walk_split(alfworld_root, "train")[1]
    gamefile = task.payload["gamefile"]
    walk = read_walkthrough(gamefile)
    cache = tmp_path / "cc"
    options = {"compile_cache": str(cache), "cached_games": 0}
    truth = _play(AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": options}), task, WalkLLM(walk, []), "a")
    true_opening = Openings.open(cache).get(gamefile)
    assert true_opening is not None
    Openings.open(cache).put(gamefile, Opening("You are on the moon.", ("look",)))
    llm = WalkLLM(walk, counted_loads)
    r = _play(AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": options}), task, llm, "b")
    asked = [c for c in llm.calls if c[0].endswith("/t0")]
    assert "You are on the moon." in asked[0][2] and len(asked) == 2  # the stale call, then the right one
    assert true_opening.observation in asked[1][2] and "You are on the moon." not in asked[1][2]
    assert _same_play(truth, r) and r.n_turns == len(walk)  # the result is the true game's
    assert Openings.open(cache).get(gamefile) == true_opening  # the kept copy is fixed on disk


def test_precompile_keeps_the_opening_a_reset_shows(alfworld_root, tmp_path):
    from skillopt_envs.alfworld.precompile import precompile

    gamefile = walk_split(alfworld_root, "valid_seen")[0].payload["gamefile"]
    precompile([gamefile], tmp_path / "cc", 1)
    kept = Openings.open(tmp_path / "cc").get(gamefile)
    game = AlfWorldGame(gamefile, None)
    try:
        first = game.reset()
    finally:
        game.close()
    assert kept == Opening(first.observation, tuple(first.admissible)) and "Your task is to:" in kept.observation


# ---------------------------------------------------------------- through the pool


@pytest.mark.slow
def test_a_first_rollout_plays_the_longest_walkthroughs_first(ray_cluster, alfworld_root, walkthroughs):
    import ray
    from scripted_server import Policies, ScriptedServer

    from skillopt_ray.engine.envpool import EnvPool, PoolSettings
    from skillopt_ray.llm.gateway import GatewayActor

    by_length = {len(walkthroughs[t.task_id]): t for t in walk_split(alfworld_root, "all")}
    tasks = [by_length[n] for n in sorted(by_length)[:4]]  # shortest first: the guess must turn this around
    keys: list[str] = []

    class KeyLog(Policies):
        def target_reply(self, body, key):
            keys.append(key)
            return super().target_reply(body, key)

    role = {"provider": "openai", "model": "scripted", "structured_output": "none", "max_concurrency": 4}
    with ScriptedServer(KeyLog(walkthroughs, "walkthrough")) as srv:
        llm = {"backend": "compatible", "target": {**role, "base_url": srv.base_url}}
        gw = GatewayActor.remote(llm_config({**llm, "optimizer": llm["target"]}), None, None)
        pool = EnvPool("alfworld", {"data_dir": str(alfworld_root), "options": {}}, gw, PoolSettings(1, 1, 0.0, 120, 1))
        try:
            results = asyncio.run(pool.run(tasks, "# skill", EpisodeContext("first", False, 40, 2)))
        finally:
            pool.shutdown()
            ray.kill(gw)
    assert [r.task_id for r in results] == [t.task_id for t in tasks]  # results stay in task order
    assert all(r.hard == 1.0 for r in results)
    played = list(dict.fromkeys(next(t.task_id for t in tasks if t.task_id in k) for k in keys))
    assert played == [t.task_id for t in reversed(tasks)]  # one slot: the longest walkthrough went first


def test_an_actors_warm_up_runs_beside_the_first_call_and_the_game_waits_for_it(
    alfworld_root, tmp_path, counted_loads, monkeypatch
):
    """start_warm_up runs the engine warm-up in a thread: an episode whose opening is kept asks its first call
    while the warm-up still runs, and loads its game only once the warm-up has ended (the engine is never used from
    two threads at once)."""
    import threading

    task = walk_split(alfworld_root, "train")[0]
    walk = read_walkthrough(task.payload["gamefile"])
    options = {"compile_cache": str(tmp_path / "cc"), "cached_games": 0}
    _play(AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": options}), task, WalkLLM(walk, []), "keep")
    counted_loads.clear()
    release, events = threading.Event(), []
    real_warm_up = AlfWorldBenchmark.warm_up

    def slow_warm_up(self):
        release.wait(30)  # held until the first call has been seen
        real_warm_up(self)
        events.append(("warm-up done", len(counted_loads)))

    monkeypatch.setattr(AlfWorldBenchmark, "warm_up", slow_warm_up)
    bench = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": options})
    llm = WalkLLM(walk, counted_loads)
    real_chat = llm.chat

    async def chat(req):
        if not events:
            events.append(("first call", len(counted_loads)))
            release.set()
        return await real_chat(req)

    llm.chat = chat  # type: ignore[method-assign]
    bench.start_warm_up()
    r = _play(bench, task, llm, "warming")
    # the warm-up's own game is the first load; the episode's game loads after it
    assert events == [("first call", 0), ("warm-up done", 1)]
    assert r.hard == 1.0 and counted_loads == [1, 1]
