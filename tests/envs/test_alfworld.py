"""ALFWorld on the real engine, with the target served by the scripted server over real HTTP."""

from __future__ import annotations

import asyncio
import json

import pytest
from scripted_server import Policies, ScriptedServer
from skillopt_envs.alfworld.benchmark import AlfWorldBenchmark, parse_action
from skillopt_envs.alfworld.data import GAME_FOLDER_TYPES, TASK_TYPES, task_type_of, walk_split
from skillopt_envs.base import EpisodeContext

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway, LLMHandle
from skillopt_ray.stages.rollout import summarize


def _gateway(url: str) -> Gateway:
    role = LLMRoleConfig(
        provider="openai", model="scripted", base_url=url, structured_output="none", max_concurrency=16
    )
    return Gateway(LLMConfig(backend="compatible", target=role, optimizer=role), None)


def _play_all(tasks, target: str, walkthroughs, max_turns: int):
    srv = ScriptedServer(Policies(walkthroughs, target))
    srv.start()
    try:
        bench = AlfWorldBenchmark(
            {"data_dir": str(tasks[0].payload["gamefile"]).split("/json_2.1.1")[0], "options": {}}
        )
        gw = _gateway(srv.base_url)
        llm = LLMHandle(gw)
        ctx = EpisodeContext("test", False, max_turns, 2)

        async def go():
            out = []
            for t in tasks:  # the engine is CPU-bound; sequential keeps this simple
                out.append(await bench.run_episode(t, "# skill", llm, ctx))
            await gw.close()
            return out

        return asyncio.run(go())
    finally:
        srv.stop()


@pytest.mark.slow
def test_walkthrough_target_wins_every_shared_game(alfworld_root, walkthroughs):
    tasks = walk_split(alfworld_root, "all")
    assert len(tasks) == 54
    results = _play_all(tasks, "walkthrough", walkthroughs, max_turns=50)
    assert [r.task_id for r in results] == [t.task_id for t in tasks]
    assert all(r.hard == 1.0 and r.soft == 1.0 and r.fail_reason == "" for r in results), [
        r.task_id for r in results if not r.hard
    ]
    stats = summarize(results)
    assert set(stats.per_type) == set(TASK_TYPES)
    assert sum(v["n"] for v in stats.per_type.values()) == 54
    assert all(v["hard"] == 1.0 for v in stats.per_type.values())


def test_nonsense_target_plays_look_and_times_out(alfworld_root, walkthroughs):
    """A reply with no <action> tag plays `look` (as in the reference); with no `done` from the engine before the
    loop's limit the failure is the reference's timeout text."""
    tasks = walk_split(alfworld_root, "train")[:2]
    results = _play_all(tasks, "nonsense", walkthroughs, max_turns=4)
    for r in results:
        assert r.hard == 0.0 and r.soft == 0.0 and r.n_turns == 4 and r.fail_reason == "Timeout after 4 steps"
        assert [s["step"] for s in r.trajectory] == [0, 1, 2, 3]
        assert all(
            s["action"] == "look" and s["model_response"] == "I would rather talk about turtles." for s in r.trajectory
        )
        assert all(s["done"] is False and s["reward"] == 0.0 for s in r.trajectory)
        assert r.trajectory[0]["env_feedback"].startswith("You are in the middle of a room")  # what `look` shows


def test_per_type_reporting():
    from skillopt_envs.base import EpisodeResult

    rs = [EpisodeResult("a", "x", 1, 1), EpisodeResult("b", "x", 0, 0), EpisodeResult("c", "y", 1, 1)]
    s = summarize(rs)
    assert s.per_type == {"x": {"n": 2, "hard": 0.5, "soft": 0.5}, "y": {"n": 1, "hard": 1.0, "soft": 1.0}}
    assert abs(s.hard - 2 / 3) < 1e-9


def test_parse_action_forms():
    assert parse_action("I think <action>go to desk 1</action>") == "go to desk 1"
    assert parse_action("<think>x</think><action>Go To Desk 1</action>") == "go to desk 1"  # lowercased
    assert parse_action('{"action": "look at the desk"}') == "look"  # no tag: look (JSON only for the embedded model)
    assert parse_action("inventory") == "look"
    assert parse_action("") == "look"


def test_manifest_split_and_missing_games(alfworld_root):
    from skillopt_envs.alfworld.data import manifest_split
    from skillopt_envs.base import DataError

    manifests = alfworld_root / "skillopt_alfworld_path_split"
    val = manifest_split(alfworld_root, str(manifests), "val", skip_missing=False)
    assert len(val) == 18 and {t.task_type for t in val} == set(TASK_TYPES)
    with pytest.raises(DataError, match="missing"):
        manifest_split(alfworld_root, str(manifests), "test", skip_missing=False)
    assert len(manifest_split(alfworld_root, str(manifests), "test", skip_missing=True)) == 18


def test_missing_data_dir_is_a_clear_error(tmp_path):
    from skillopt_envs.base import DataError

    with pytest.raises(DataError, match="does not exist"):
        AlfWorldBenchmark({"data_dir": str(tmp_path / "nope"), "options": {}})
    (tmp_path / "empty" / "json_2.1.1" / "train").mkdir(parents=True)
    b = AlfWorldBenchmark({"data_dir": str(tmp_path / "empty"), "options": {}})
    with pytest.raises(DataError, match="39 of 39 games .* missing"):  # the paper split names the games it lacks
        b.load_split("train")
    with pytest.raises(DataError, match="none of the games"):
        AlfWorldBenchmark({"data_dir": str(tmp_path / "empty"), "options": {"skip_missing_games": True}}).load_split(
            "train"
        )
    b = AlfWorldBenchmark({"data_dir": str(tmp_path / "empty"), "options": {"split_source": "folders"}})
    with pytest.raises(DataError, match="no game.tw-pddl"):
        b.load_split("train")


@pytest.mark.slow
def test_generated_sample_games_are_winnable(tmp_path):
    from skillopt_envs.alfworld.samples import generate_games, verify_game

    games = generate_games(tmp_path, {"train": 1}, seed=7)
    assert len(games) == 6
    types = set()
    for g in games:
        data = json.loads(g.read_text())
        assert data["walkthrough"] and "(:goal" in data["pddl_problem"]
        assert data["pddl_problem"].count(" - receptacle") >= 9  # several receptacles
        assert verify_game(g)  # replayed independently on the real engine
        types.add(g.parent.parent.name.split("-")[0])
    assert types == set(GAME_FOLDER_TYPES)  # folders named as alfworld-download names them
    assert {task_type_of(str(g)) for g in games} == set(TASK_TYPES)  # reported with the reference's names


def test_replayed_games_come_from_the_cache_and_play_identically(alfworld_root, walkthroughs):
    tasks = walk_split(alfworld_root, "train")[:2]
    srv = ScriptedServer(Policies(walkthroughs, "walkthrough", wander=2))
    srv.start()
    try:

        async def go():
            gw = _gateway(srv.base_url)
            llm = LLMHandle(gw)
            bench = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": {}})
            passes = []
            for p in range(2):
                ctx = EpisodeContext(f"pass{p}", False, 20, 4)
                passes.append([await bench.run_episode(t, "# skill", llm, ctx) for t in tasks])
            await gw.close()
            return bench, passes

        bench, (first, second) = asyncio.run(go())
        assert bench._games.loads == 2  # the second pass reset cached games instead of loading them
        assert [r.trajectory for r in first] == [r.trajectory for r in second]
        assert all(r.hard == 1.0 for r in first + second)
    finally:
        srv.stop()


@pytest.mark.slow
def test_engine_speedups_keep_every_observation_identical(alfworld_root, tmp_path):
    """scripts/bench_engine.py plays games on stock textworld, then with envs/alfworld/speedups.py and an empty
    compile cache, then with that cache on disk only, in one process."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_engine.py"
    out = tmp_path / "engine.json"
    proc = subprocess.run(
        [sys.executable, str(script), "--data", str(alfworld_root), "--games", "4", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["identical_observations"] and res["won"] == [4, 4, 4]
    assert res["compiled"] == {"sas": 4, "grammar": 4} and res["disk_cache_hits"] == 8  # each part once per game
    assert res["cold_over_stock"] < 0.85  # measured 0.48 over 18 games
    assert res["warm_over_stock"] < 0.3  # measured 0.03 over 18 games


def test_actor_warm_up_plays_one_game_and_tolerates_a_broken_one(alfworld_root, tmp_path):
    import textworld.envs.pddl.textgen as textgen
    from skillopt_envs.alfworld import speedups

    speedups.install().memory.clear()  # as in a fresh actor: earlier tests may have loaded the same game
    bench = AlfWorldBenchmark({"data_dir": str(alfworld_root), "options": {"compile_cache": str(tmp_path / "cc")}})
    bench.warm_up()
    assert list((tmp_path / "cc").glob("sas-*.pkl.z"))  # the warm-up game was compiled into the configured cache
    assert textgen._skillopt_libraries.free  # and its planner library waits for the first episode
    broken = tmp_path / "broken" / "json_2.1.1" / "train" / "pick_and_place_simple-X-None-Y-1" / "trial_1"
    broken.mkdir(parents=True)
    (broken / "game.tw-pddl").write_text("{not json")
    AlfWorldBenchmark({"data_dir": str(tmp_path / "broken"), "options": {"compile_cache": "off"}}).warm_up()  # no raise


def test_replanning_still_works_from_the_current_state(alfworld_root):
    """The replanning translation is made on the first replan, here two steps into the game: the plan
    starts from where the game is (shorter than one from the start) and wins."""
    from skillopt_envs.alfworld.game import AlfWorldGame, read_walkthrough

    def replan(game):
        pddl = game.env.unwrapped
        return pddl._pddl_state.replan(pddl._entity_infos)

    for task in walk_split(alfworld_root, "all")[6:9]:
        fresh = AlfWorldGame(task.payload["gamefile"])
        fresh.reset()
        from_start = replan(fresh)
        fresh.close()
        game = AlfWorldGame(task.payload["gamefile"])
        game.reset()
        for action in read_walkthrough(task.payload["gamefile"])[:2]:
            game.step(action)
        plan = replan(game)
        assert 0 < len(plan) < len(from_start), (plan, from_start)
        outcome = None
        for action in plan:
            outcome = game.step(action)
        assert outcome is not None and outcome.won, (task.task_id, plan)
        game.close()
