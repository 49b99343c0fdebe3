"""Which engine runs a job: the one-process engine (skillopt_ray/engine/local.py) or Ray, from `ray.mode`.

`ray.mode=local` and `ray.mode=cluster` choose; `auto` (the default) runs a job that fits in one process there and
everything else on Ray. A job fits when nothing asks for a cluster (no `ray.address` or RAY_ADDRESS, no cluster kept
up by `python -m skillopt_ray.cluster up`, Ray not already started in this process, no sender shards, the driver
not sent to another node), its benchmark can host its env workers on threads (`Benchmark.one_process`: not ALFWorld,
whose games hold the CPU in Python and play faster in Ray's processes), and it is small: at most LOCAL_MAX_EPISODES
episodes at a time and LOCAL_MAX_WORKERS env workers. Imports no Ray (the reason to choose is to not pay for it).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.config.plain import PlainConfig

LOCAL_MAX_EPISODES = 64  # episodes at a time (ray.env_actors x ray.episodes_per_actor) the one-process engine takes
LOCAL_MAX_WORKERS = 16  # env workers (threads) it takes; a benchmark that holds state has one per ray.env_actors
MODES = ("auto", "local", "cluster")


@dataclass(frozen=True)
class EngineChoice:
    kind: str  # "local" | "ray"
    why: str

    def line(self) -> str:
        """One line (under 80 columns for every choice auto makes but a long ray.address)."""
        where = "one process" if self.kind == "local" else "Ray"
        return f"engine: {where} ({self.why})"


def choose(data: PlainConfig) -> EngineChoice:
    """The engine for this config, and why (printed in the run's first lines)."""
    r = data["ray"]
    mode = str(r.get("mode") or "auto")
    address = r.get("address") or os.environ.get("RAY_ADDRESS")
    if mode == "cluster":
        return EngineChoice("ray", "ray.mode=cluster")
    if mode == "local":
        if address and address != "local":
            raise UsageError(
                f"ray.mode=local runs the job in this process, but ray.address={address} names a cluster: drop the "
                "address (and RAY_ADDRESS), or set ray.mode=cluster"
            )
        if not _one_process(data):
            raise UsageError(
                f"ray.mode=local runs every env worker on a thread of this process, but {data['env']['name']}'s "
                "episodes need processes of their own (its game engine is not thread-safe): set ray.mode=auto or "
                "ray.mode=cluster"
            )
        return EngineChoice("local", "ray.mode=local")
    why_ray = _needs_ray(data, address)
    if why_ray:
        return EngineChoice("ray", f"auto: {why_ray}")
    episodes = int(r["env_actors"]) * int(r["episodes_per_actor"])
    return EngineChoice("local", f"auto: {episodes} episodes at a time, no cluster named or kept up")


def _needs_ray(data: PlainConfig, address: object) -> str:
    """Why this job runs on Ray under ray.mode=auto, or "" when it fits in one process."""
    r = data["ray"]
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return "Ray is already started in this process"
    from skillopt_ray.engine.warm import serving

    if serving() is not None:
        return "the kept cluster's holder runs it"
    if address and address != "local":
        return f"ray.address={address} names a cluster"
    from skillopt_ray.runs import kept_cluster

    if kept_cluster.live() is not None:
        return "a cluster is kept up"
    if int(r.get("gateway_shards") or 1) > 1:
        return f"ray.gateway_shards={r['gateway_shards']} sends from processes of their own"
    if r.get("driver_node", "local") != "local":
        return f"ray.driver_node={r['driver_node']}"
    episodes = int(r["env_actors"]) * int(r["episodes_per_actor"])
    if episodes > LOCAL_MAX_EPISODES:
        return f"{episodes} episodes at a time (one process takes up to {LOCAL_MAX_EPISODES})"
    if int(r["env_actors"]) > LOCAL_MAX_WORKERS:
        return f"ray.env_actors={r['env_actors']} (one process takes up to {LOCAL_MAX_WORKERS})"
    if not _one_process(data):
        return f"{data['env']['name']} plays faster in processes of its own"
    return ""


def _one_process(data: PlainConfig) -> bool:
    """Whether the benchmark lets the one-process engine host its env workers (an unknown one: its run says why)."""
    import skillopt_envs

    env = data["env"]
    try:
        return bool(getattr(skillopt_envs.benchmark_class(env["name"], env.get("benchmark")), "one_process", True))
    except Exception:  # noqa: BLE001 - the run itself reports a benchmark it cannot load, in one line
        return True
