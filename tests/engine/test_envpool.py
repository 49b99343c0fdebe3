"""Environment actors: asynchronous, ordered, and fault tolerant."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from helpers import llm_config
from scripted_server import Fault, Policies, ScriptedServer
from skillopt_envs.alfworld.data import walk_split
from skillopt_envs.base import EpisodeContext

from skillopt_ray.engine.envpool import EnvPool, PoolSettings  # noqa: E402
from skillopt_ray.llm.gateway import GatewayActor
from skillopt_ray.llm.types import GatewayLost, LLMRequestRejected


def _llm_cfg(url):
    role = {
        "provider": "openai",
        "model": "scripted",
        "base_url": url,
        "structured_output": "none",
        "max_concurrency": 16,
    }
    return {"backend": "compatible", "target": role, "optimizer": role}


@contextlib.contextmanager
def pool_on_scripted(alfworld_root, walkthroughs, settings: PoolSettings, latency_s: float = 0.0, faults=()):
    """A scripted server, a gateway actor and an env pool on the shared games; all torn down after."""
    import ray

    srv = ScriptedServer(Policies(walkthroughs, "walkthrough"), latency_s=latency_s)
    srv.start()
    srv.inject(*faults)
    gw = GatewayActor.remote(llm_config(_llm_cfg(srv.base_url)), None, None)
    pool = EnvPool("alfworld", {"data_dir": str(alfworld_root), "options": {}}, gw, settings)
    try:
        yield pool
    finally:
        pool.shutdown()
        ray.kill(gw)
        srv.stop()


def test_killed_actor_episodes_are_rerun_and_results_stay_aligned(ray_cluster, alfworld_root, walkthroughs):
    import ray

    tasks = walk_split(alfworld_root, "train")[:6]
    with pool_on_scripted(alfworld_root, walkthroughs, PoolSettings(2, 3, 0.0, 120.0, 2), latency_s=1.0) as pool:

        async def go():
            run = asyncio.ensure_future(pool.run(tasks, "# skill", EpisodeContext("pooltest", False, 30, 4)))
            # every episode needs 4 calls (4 s): all six are still in flight on both actors
            await asyncio.sleep(2.0)
            victim = pool.actors[0]
            ray.kill(victim, no_restart=True)
            return await run

        results = asyncio.run(go())
        assert [r.task_id for r in results] == [t.task_id for t in tasks]
        assert all(r.hard == 1.0 and not r.infra_error for r in results)
        assert pool.replaced >= 1 and pool.retried_episodes >= 1


def test_fatal_llm_error_stops_the_rollout_instead_of_scoring_zero(ray_cluster, alfworld_root, walkthroughs):
    tasks = walk_split(alfworld_root, "train")[:2]
    faults = [Fault(401) for _ in range(20)]
    with pool_on_scripted(alfworld_root, walkthroughs, PoolSettings(1, 2, 0.0, 60.0, 2), faults=faults) as pool:
        with pytest.raises(LLMRequestRejected, match="HTTP 401"):
            asyncio.run(pool.run(tasks, "# skill", EpisodeContext("fatal", False, 5, 2)))


def test_a_dead_gateway_stops_the_rollout_instead_of_replacing_healthy_env_actors(
    ray_cluster, alfworld_root, walkthroughs
):
    import ray

    tasks = walk_split(alfworld_root, "train")[:4]
    with pool_on_scripted(alfworld_root, walkthroughs, PoolSettings(2, 2, 0.0, 120.0, 2), latency_s=1.0) as pool:

        async def go():
            run = asyncio.ensure_future(pool.run(tasks, "# skill", EpisodeContext("gwdead", False, 30, 4)))
            await asyncio.sleep(1.5)  # every episode is waiting on a model call
            ray.kill(pool.gateway, no_restart=True)
            return await run

        t0 = time.monotonic()
        with pytest.raises(GatewayLost) as err:
            asyncio.run(go())
        assert time.monotonic() - t0 < 30
        msg = str(err.value)
        assert msg.startswith("the LLM gateway actor died") and "rerun the same command" in msg
        assert "\x1b[" not in msg and "\n" not in msg  # one line, no colour codes
        assert pool.replaced == 0 and pool.retried_episodes == 0  # the env actors were fine


def test_hung_episode_times_out_and_is_reported_as_infra_failure(ray_cluster, alfworld_root, walkthroughs):
    tasks = walk_split(alfworld_root, "train")[:1]
    with pool_on_scripted(alfworld_root, walkthroughs, PoolSettings(1, 1, 0.0, 2.0, 1), latency_s=5.0) as pool:
        t0 = time.monotonic()
        [r] = asyncio.run(pool.run(tasks, "# skill", EpisodeContext("hang", False, 5, 2)))
        assert r.infra_error and r.fail_reason == "infra_error" and "timed out" in r.error
        assert r.hard == 0.0 and pool.replaced == 2
        assert time.monotonic() - t0 < 30


def test_slots_send_a_task_back_to_its_previous_actor_when_it_is_free():
    from skillopt_ray.engine.envpool import Slots

    async def go():
        s = Slots(actors=2, per_actor=1)
        a = await s.take(preferred=1)
        b = await s.take(preferred=1)  # actor 1 is busy: no waiting for it
        waiter = asyncio.ensure_future(s.take(preferred=None))
        await asyncio.sleep(0.01)
        assert not waiter.done()  # every slot is taken
        await s.give(a)
        return a, b, await waiter

    assert asyncio.run(go()) == (1, 0, 1)


def test_replayed_games_go_back_to_the_actor_that_has_them_loaded(ray_cluster, alfworld_root, walkthroughs):
    tasks = walk_split(alfworld_root, "train")[:4]
    with pool_on_scripted(alfworld_root, walkthroughs, PoolSettings(2, 2, 0.0, 120.0, 1)) as pool:
        ctx = EpisodeContext("affinity", False, 30, 4)
        asyncio.run(pool.run(tasks, "# skill", ctx))
        first = dict(pool.home)
        results = asyncio.run(pool.run(tasks, "# skill", ctx))
        assert all(r.hard == 1.0 for r in results)
        assert pool.affinity_hits == 4 and pool.home == first


def test_a_chat_benchmark_gets_one_actor_with_every_slot_and_an_eval_no_idle_actors():
    from skillopt_ray.engine.envpool import pool_shape

    assert pool_shape(4, 4, holds_state=False) == (1, 16)  # the same 16 episodes at once, one process
    assert pool_shape(4, 4, holds_state=False, eval_tasks=40) == (1, 16)
    assert pool_shape(4, 4, holds_state=True) == (4, 4)  # games: spread over the configured actors
    assert pool_shape(4, 4, holds_state=True, eval_tasks=4) == (1, 4)  # a 4-game eval fills one actor
    assert pool_shape(4, 4, holds_state=True, eval_tasks=9) == (3, 4)
    assert pool_shape(8, 8, holds_state=True, eval_tasks=0) == (1, 8)


def test_benchmarks_say_whether_their_episodes_keep_state_in_the_actor(tmp_path):
    import skillopt_envs

    stateless = {n for n in ("livemathematicianbench", "searchqa", "docvqa")}
    for name in skillopt_envs.names():
        if name in stateless:
            assert skillopt_envs.benchmark_class(name).holds_env_state is False, name
        elif name != "custom":
            assert skillopt_envs.benchmark_class(name).holds_env_state is True, name  # games, sandboxes, corpora
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "1+1?", "answer": "2"}\n')
    assert skillopt_envs.make("custom", {"data_dir": str(tasks), "options": {}}).holds_env_state is False
    check = tmp_path / "check.py"
    check.write_text("print(1)\n")
    scripted = {"data_dir": str(tasks), "options": {"scorer": "script", "check": str(check)}}
    assert skillopt_envs.make("custom", scripted).holds_env_state is True  # checks run in a sandbox


def test_replays_start_the_tasks_that_took_longest_first():
    from skillopt_envs.base import Task

    from skillopt_ray.engine.envpool import start_order

    tasks = [Task(i, "t", {}) for i in ("a", "b", "c", "d")]
    assert start_order(tasks, {}) == [0, 1, 2, 3]  # nothing played yet: the tasks' own order
    assert start_order(tasks, {"a": 3, "b": 9, "c": 3, "d": 5}) == [1, 3, 0, 2]  # ties keep their order
    assert start_order(tasks, {"a": 2, "b": 10}) == [1, 2, 3, 0]  # unplayed ones count as the mean (6)


class KeyLog(Policies):
    """The walkthrough policy, remembering each target call's sample key in the order they came."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.keys: list[str] = []

    def target_reply(self, body, key):
        self.keys.append(key)
        return super().target_reply(body, key)


def test_a_replayed_rollout_plays_its_longest_games_first(ray_cluster, alfworld_root, walkthroughs):
    import ray

    by_length = {len(walkthroughs[t.task_id]): t for t in walk_split(alfworld_root, "all")}
    tasks = [by_length[n] for n in sorted(by_length)[:4]]  # shortest first: the replay must turn this around
    policies = KeyLog(walkthroughs, "walkthrough", wander=0)
    with ScriptedServer(policies) as srv:
        gw = GatewayActor.remote(llm_config(_llm_cfg(srv.base_url)), None, None)
        pool = EnvPool("alfworld", {"data_dir": str(alfworld_root), "options": {}}, gw, PoolSettings(1, 1, 0.0, 120, 1))
        try:
            first = asyncio.run(pool.run(tasks, "# skill", EpisodeContext("order1", False, 40, 2)))
            policies.keys.clear()
            second = asyncio.run(pool.run(tasks, "# skill", EpisodeContext("order2", False, 40, 2)))
        finally:
            pool.shutdown()
            ray.kill(gw)
    assert [r.task_id for r in second] == [t.task_id for t in tasks]  # results stay in task order
    turns = {r.task_id: r.n_turns for r in first}
    assert len(set(turns.values())) > 1, turns  # games of different lengths, or the order says nothing
    played = list(dict.fromkeys(next(t.task_id for t in tasks if t.task_id in k) for k in policies.keys))
    assert played == sorted(turns, key=lambda t: -turns[t])  # one slot: the longest game went first
