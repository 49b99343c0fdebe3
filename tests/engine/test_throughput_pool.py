"""Episodes reach their env actors in batches (EnvActor.submit/collect): the same results, in task order, with few
actor calls; an episode's exception that cannot travel as itself still names its type and kind."""

from __future__ import annotations

import asyncio
import threading

from helpers import llm_config
from skillopt_envs.base import EpisodeContext

from skillopt_ray.engine.envpool import EnvPool, EpisodeCrash, PoolSettings, episode_error
from skillopt_ray.llm.types import GatewayLost, LLMUnavailable


class Unpicklable(RuntimeError):
    kind = "sandbox_start"

    def __init__(self, message: str):
        super().__init__(message)
        self.lock = threading.Lock()  # a lock does not pickle


def test_episode_errors_travel_as_themselves_or_as_a_named_stand_in():
    err = LLMUnavailable("endpoint down")
    assert episode_error(err, None) is err
    crash = episode_error(Unpicklable("jail refused\nsecond line"), None)
    assert isinstance(crash, EpisodeCrash) and crash.type_name == "Unpicklable" and crash.kind == "sandbox_start"
    assert str(crash) == "jail refused\nsecond line"
    import pickle

    again = pickle.loads(pickle.dumps(crash))
    assert (again.type_name, again.kind, str(again)) == ("Unpicklable", "sandbox_start", str(crash))
    from ray.exceptions import RayActorError

    assert isinstance(episode_error(RayActorError(), None), GatewayLost)


def test_a_pool_sends_many_episodes_in_few_actor_calls(ray_cluster):
    import ray
    from helpers import echo_llm as _llm
    from helpers import echo_server as _echo
    from skillopt_envs.synthetic.benchmark import SyntheticBenchmark

    from skillopt_ray.llm.gateway import GatewayActor

    env_cfg = {"options": {"tasks": 120, "calls": 2}}
    tasks = SyntheticBenchmark(env_cfg).load_split("train")
    with _echo(latency_s=0.05) as srv:
        gw = GatewayActor.remote(llm_config(_llm(srv.base_url)), None, None, None)
        pool = EnvPool("synthetic", env_cfg, gw, PoolSettings(2, 60, 0.0, 60.0, 1))
        try:
            results = asyncio.run(pool.run(tasks, "# skill", EpisodeContext("batched", False, 2, 0)))
            assert [r.task_id for r in results] == [t.task_id for t in tasks]
            assert all(r.hard == 1.0 and not r.infra_error for r in results)  # each reply reached its own episode
            assert srv.state.attempts == 240
            batches = sum(b.batches for b in pool.executor._batchers.values())
            assert batches <= 20  # 120 episodes, not one actor call each
        finally:
            pool.shutdown()
            ray.kill(gw)
