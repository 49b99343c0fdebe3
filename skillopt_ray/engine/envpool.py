"""A pool of environment workers: Ray actors, or objects of the one-process engine (skillopt_ray/engine/executor.py).

Episodes run concurrently and independently (no lock-step): each takes a free
slot, so one slow episode never holds the others. Dead or hung actors are
replaced and their episodes re-run; after the retries an episode is reported
as an infrastructure failure, never as a lost game. An endpoint the LLM client
gave up on (LLMUnavailable, after its own retry window) is not replayed: the
episode is an infrastructure failure at once.

Placement: actors are spread over the cluster's nodes (SPREAD). On a cluster whose
nodes advertise a per-benchmark custom resource (`skillopt_env_<benchmark>`, e.g.
`ray start --resources '{"skillopt_env_alfworld": 8}'`), each actor asks for one unit
of it, so env actors land only on the nodes that host that benchmark (its data, its
sandbox) and at most as many per node as the node advertises. A node that loses its
actors (killed, lost) costs their episodes one retry on the other nodes: until Ray
itself declares the node dead (a few heartbeats later) it still looks alive, so a
replacement avoids every node that lost an actor in the last minute, falling back to
any node when no other can host it (a one-node cluster). An actor
whose node cannot see the benchmark's data stops the run with an error naming the
node, instead of failing every episode as an infrastructure error.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import skillopt_envs
from skillopt_envs.base import INFRA_KINDS, NOT_PLAYED, DataError, EnvSettings, EpisodeContext, EpisodeResult, Task
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base.lifeline import Owner
from skillopt_ray.base.startup_trace import mark
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.engine.executor import Executor, ray_executor, ray_failure
from skillopt_ray.engine.warm import ActorOptions
from skillopt_ray.llm.callbox import Mailboxes
from skillopt_ray.llm.gateway import LLMHandle
from skillopt_ray.llm.types import GatewayLost, LLMError, LLMUnavailable, ReplyIncomplete

NODE_LABEL = "ray.io/node-id"  # the label Ray gives every node
SUSPECT_NODE_S = 60.0  # how long a node that lost an actor is avoided by replacements
BATCH_METHOD_SLOTS = 4  # an env actor's concurrency beyond its episodes (see actor_options)


def _first_line(e: BaseException) -> str:
    """The first line of Ray's error text without its colour codes."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__


class EpisodeCrash(RuntimeError):
    """An episode's exception that cannot travel back to the pool as itself (it does not pickle): its type's name,
    its message and its infrastructure kind, if it had one."""

    def __init__(self, type_name: str, message: str, kind: Optional[str] = None):
        super().__init__(message)
        self.type_name, self.kind = type_name, kind

    def __reduce__(self) -> Any:
        return (EpisodeCrash, (self.type_name, str(self), self.kind))


def episode_error(e: Exception, item: Any) -> Exception:
    """What an env actor hands the pool for an episode that raised: the exception itself, as a Ray call carried it;
    the gateway actor gone (an actor error inside the episode) as GatewayLost, which stops the run; one that does not
    survive pickling as an EpisodeCrash."""
    import pickle

    if ray_failure(e) is not None:
        return GatewayLost(
            f"the LLM gateway actor died ({_first_line(e)}); no episode can reach the model: "
            "rerun the same command to resume the run"
        )
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001 - any failure to travel
        return EpisodeCrash(type(e).__name__, str(e), getattr(e, "kind", None))


class NodeDataError(DataError):
    """An env actor's node cannot load the benchmark (its data is not there): fatal for the run, not retried."""


def resource_name(env_name: str) -> str:
    """The custom resource nodes advertise to host a benchmark's env actors."""
    return f"skillopt_env_{env_name}"


def resolve_env_resource(setting: Optional[str], env_name: str, cluster: dict[str, float]) -> Optional[str]:
    """The custom resource each env actor asks for, from `ray.env_resource`: `auto` takes
    skillopt_env_<benchmark> when some node advertises it (none otherwise: a local run is unchanged);
    a name must be advertised; `none` (or empty) asks for none."""
    from skillopt_ray.config import ConfigError

    if setting is None or str(setting).strip().lower() in ("", "none", "off"):
        return None
    if setting == "auto":
        name = resource_name(env_name)
        return name if cluster.get(name, 0) > 0 else None
    if cluster.get(setting, 0) <= 0:
        raise ConfigError(
            f"ray.env_resource={setting}: no node of the cluster advertises that resource; start the nodes that "
            f"should host env actors with --resources '{{\"{setting}\": N}}', or set ray.env_resource=auto"
        )
    return setting


def check_fits(s: PoolSettings, resource: Optional[str], cluster: dict[str, float]) -> None:
    """Env actors the cluster can never hold would wait forever with their episodes queued on them: say so now."""
    from skillopt_ray.config import ConfigError

    cpus = cluster.get("CPU", 0.0)
    if s.actor_num_cpus > 0 and s.actors * s.actor_num_cpus > cpus + 1e-9:
        raise ConfigError(
            f"ray.env_actors={s.actors} x ray.actor_num_cpus={s.actor_num_cpus:g} = {s.actors * s.actor_num_cpus:g} CPUs, "
            f"but the cluster has {cpus:g}: actors past the {int(cpus // s.actor_num_cpus)}th would never start; "
            "lower ray.env_actors or ray.actor_num_cpus"
        )
    if resource is not None and s.actors * s.env_resource_per_actor > cluster.get(resource, 0.0) + 1e-9:
        raise ConfigError(
            f"ray.env_actors={s.actors} env actors need {s.actors * s.env_resource_per_actor:g} of the resource "
            f"{resource}, but the cluster's nodes advertise {cluster.get(resource, 0.0):g} in all; lower ray.env_actors "
            "or advertise more on the nodes (ray start --resources)"
        )


def pool_shape(actors: int, per_actor: int, holds_state: bool, eval_tasks: Optional[int] = None) -> tuple[int, int]:
    """(env actors, episodes per actor) for a run. Episodes that keep nothing in their actor (a chat benchmark) all
    go to one actor holding every slot: as many at once as before, without starting and warming up more processes.
    Otherwise an eval starts no more actors than its `eval_tasks` fill (each one costs an engine import)."""
    if not holds_state:
        return 1, actors * per_actor
    if eval_tasks is not None:
        actors = max(1, min(actors, -(-eval_tasks // per_actor)))
    return actors, per_actor


def actor_options(
    s: PoolSettings, resource: Optional[str], avoid: list[str], max_concurrency: Optional[int] = None
) -> ActorOptions:
    """Ray options of one env actor: its benchmark's resource, if any, and spread over the nodes, or away from the
    `avoid` nodes (ones that just lost an actor) when another node can host it."""
    # episodes arrive in batches (EnvActor.submit) and run as the actor's own tasks; the slots left are for submit,
    # the caller's waiting collect and cancel_calls (and a direct run() call)
    slots = (max_concurrency or s.episodes_per_actor) + BATCH_METHOD_SLOTS
    opts = ActorOptions(num_cpus=s.actor_num_cpus, max_concurrency=slots)
    if resource:
        opts["resources"] = {resource: s.env_resource_per_actor}
    if avoid:  # prefer other nodes; any node (even a suspect one) when no other can host the actor
        opts["label_selector"] = {NODE_LABEL: f"!in({','.join(avoid)})"}
        opts["fallback_strategy"] = [{"label_selector": {}}]
    else:
        opts["scheduling_strategy"] = "SPREAD"
    return opts


def prestart_actor(
    cfg_dict: PlainConfig, gateway: Any, owners: list[Owner], spawn: Optional[Any] = None
) -> Optional[Any]:
    """One env actor started by the command beside the driver actor (every pool has at least one), so its process
    comes up while the driver's does. It takes as many episodes at once as the largest pool shape could give it."""
    from skillopt_ray.config import ConfigError
    from skillopt_ray.engine.ray_executor import RayExecutor
    from skillopt_ray.engine.warm import fresh

    r = cfg_dict["ray"]
    s = settings_from(r, r["env_actors"], r["env_actors"] * r["episodes_per_actor"])
    env_name = cfg_dict["env"]["name"]
    executor = RayExecutor(spawn or fresh)
    try:
        resource = resolve_env_resource(s.env_resource, env_name, executor.resources())
    except ConfigError:
        return None  # the driver's pool says what is wrong, as a config error
    return executor.start(EnvWorker, actor_options(s, resource, []), env_name, cfg_dict["env"], gateway, owners)


def settings_from(ray_cfg: dict[str, Any], actors: int, per_actor: int) -> PoolSettings:
    """The pool settings of the `ray` config group, with the pool's shape."""
    return PoolSettings(
        actors,
        per_actor,
        ray_cfg["actor_num_cpus"],
        ray_cfg["episode_timeout_s"],
        ray_cfg["episode_retries"],
        ray_cfg.get("env_resource", "auto"),
        ray_cfg.get("env_resource_per_actor", 1.0),
    )


class EnvWorker:
    """Hosts one benchmark instance and runs its episodes (the Ray actor `EnvActor`, or an object of the one-process
    engine on a thread of its own)."""

    ray_name = "EnvActor"
    ray_options: ActorOptions = {}

    def __init__(self, env_name: str, env_cfg: EnvSettings, gateway: Any, owners: Optional[list[Owner]] = None):
        from skillopt_ray.base.lifeline import watch

        watch(list(owners or []), "env actor")  # the owner (CLI, driver) gone: stop before starting another episode
        mark("env-actor-started")
        self.llm = LLMHandle(gateway)
        self.boxes = Mailboxes(self.play, episode_error)  # episodes sent in batches (submit), on Ray
        self.bench: Any = None
        self.started_one = False  # whether an episode has started here (the first one marks it)
        self.data_error = ""  # this node cannot run the benchmark: every episode here says why
        try:
            missing = [
                f"env.{key}={env_cfg[key]}"
                for key in ("data_dir", "manifest_dir")
                if env_cfg.get(key) and not Path(str(env_cfg[key])).exists()
            ]
            if missing:
                raise DataError(f"{' and '.join(missing)} does not exist there")
            self.bench = skillopt_envs.make(env_name, env_cfg)
            self.bench.start_warm_up()
            # imported now, not by the first episode, whose import would block this actor's other episodes
            import skillopt_ray.harness.agent_runner  # noqa: F401

            mark("env-actor-ready")
        except DataError as e:
            self.data_error = (
                f"the {env_name} env actor on {where()} cannot load the benchmark: {e}; every node that hosts "
                f"env actors must see the data at the same path (a shared filesystem), or advertise the resource "
                f"skillopt_env_{env_name} only on the nodes that have it"
            )

    async def run(self, task: Task, skill: str, ctx: EpisodeContext) -> JSONObject:
        if not self.started_one:  # a start-up mark, once: it reads the environment
            self.started_one = True
            mark("first-episode")
        if self.data_error:
            raise NodeDataError(self.data_error)
        from skillopt_ray.harness.agent_runner import episode_context

        result = await self.bench.run_episode(task, skill, self.llm, await episode_context(self.llm, ctx))
        return result.to_dict()

    async def play(self, item: tuple[Task, str, EpisodeContext]) -> JSONObject:
        """One episode sent as one item (task, skill, context): what the pool sends."""
        return await self.run(*item)

    def submit(self, box: str, episodes: list[tuple[int, Any]]) -> int:
        """Start a batch of episodes, each (sequence number, (task, skill, context)); each result waits in the
        caller's mailbox for collect(). One actor call for many episodes: skillopt_ray/llm/callbox.py."""
        return self.boxes.submit(box, episodes)

    async def collect(self, box: str, wait_s: float) -> list[Any]:
        return await self.boxes.collect(box, wait_s)

    def cancel_calls(self, box: str, seqs: list[int]) -> None:
        self.boxes.cancel(box, seqs)

    def node(self) -> str:
        ray = sys.modules.get("ray")
        return str(ray.get_runtime_context().get_node_id()) if ray is not None and ray.is_initialized() else "local"

    def pid(self) -> int:
        return os.getpid()

    def memory_mb(self) -> float:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def where() -> str:
    """This process's node, for messages: its address and Ray node id, or "this machine" outside Ray."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return "this machine"
    return f"node {ray.util.get_node_ip_address()} ({ray.get_runtime_context().get_node_id()[:12]})"


def __getattr__(name: str) -> Any:
    """`EnvActor`: the Ray actor class of EnvWorker, made (and Ray imported) on first use."""
    if name != "EnvActor":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from skillopt_ray.base.ray_class import remote_class

    return remote_class(EnvWorker)


def turns_guess(task: Task, turns: dict[str, int]) -> Optional[float]:
    """The turns `task` took when last played, else its benchmark's guess (a positive `expected_turns` in its
    payload, e.g. an ALFWorld game's walkthrough length), else None."""
    if task.task_id in turns:
        return turns[task.task_id]
    hint = task.payload.get("expected_turns") if isinstance(task.payload, dict) else None
    if isinstance(hint, (int, float)) and not isinstance(hint, bool) and hint > 0:
        return float(hint)
    return None


def start_order(tasks: list[Task], turns: dict[str, int]) -> list[int]:
    """Indices of `tasks`, longest first by the `turns` each took when last played (a gate replays the same tasks
    every step) or, before that, by its benchmark's guess: the long ones do not start last and hold the rollout
    open alone. A task with neither counts as the mean of the others; with none known, the order is the tasks'
    own (ties keep it too)."""
    guesses = [turns_guess(t, turns) for t in tasks]
    known = [g for g in guesses if g is not None]
    if not known:
        return list(range(len(tasks)))
    mean = sum(known) / len(known)
    filled = [mean if g is None else g for g in guesses]
    return sorted(range(len(tasks)), key=lambda i: -filled[i])


class Slots:
    """Free episode slots per actor. A task returns to the actor that last ran it when that actor
    has a free slot (its game is still loaded there: a replay costs a reset, not a load);
    otherwise it takes the actor with the most free slots. Never waits for a busy favourite."""

    def __init__(self, actors: int, per_actor: int):
        self.free = [per_actor] * actors
        self._cond = asyncio.Condition()

    async def take(self, preferred: Optional[int]) -> int:
        async with self._cond:
            await self._cond.wait_for(lambda: any(self.free))
            if preferred is not None and preferred < len(self.free) and self.free[preferred] > 0:
                idx = preferred
            else:
                idx = max(range(len(self.free)), key=lambda i: self.free[i])
            self.free[idx] -= 1
            return idx

    async def give(self, idx: int) -> None:
        async with self._cond:
            self.free[idx] += 1
            self._cond.notify()


@dataclass
class PoolSettings:
    actors: int
    episodes_per_actor: int
    actor_num_cpus: float
    episode_timeout_s: float
    episode_retries: int
    env_resource: Optional[str] = "auto"  # ray.env_resource (see resolve_env_resource)
    env_resource_per_actor: float = 1.0


class EnvPool:
    def __init__(
        self,
        env_name: str,
        env_cfg: EnvSettings,
        gateway: Any,
        settings: PoolSettings,
        owners: Optional[list[Owner]] = None,
        prestarted: Optional[list[Any]] = None,
        executor: Optional[Executor] = None,
    ):
        self.owners = list(owners or [])
        self.env_name = env_name
        self.env_cfg = env_cfg
        self.gateway = gateway
        self.s = settings
        self.executor = executor or ray_executor()
        self.resource: Optional[str] = None  # placement: only a cluster has nodes that advertise resources
        if self.executor.kind == "ray":
            cluster = self.executor.resources()
            self.resource = resolve_env_resource(settings.env_resource, env_name, cluster)
            check_fits(settings, self.resource, cluster)
        self.suspect_nodes: dict[str, float] = {}  # node id -> when it last lost an actor (monotonic)
        ready = list(prestarted or [])  # started beside the driver (prestart_actor): adopted, the rest spawned here
        for extra in ready[settings.actors :]:
            self.executor.stop(extra)
        self.actors: list[Any] = ready[: settings.actors] + [
            self._spawn() for _ in range(settings.actors - len(ready[: settings.actors]))
        ]
        self.actor_node_refs: list[Any] = [self.executor.call(a, "node") for a in self.actors]
        self.generation = [0] * settings.actors
        self.replaced = 0
        self.retried_episodes = 0
        self._slots: Optional[Slots] = None
        self.home: dict[str, int] = {}  # task_id -> actor that last ran it (cache affinity)
        self.affinity_hits = 0
        self._slots_loop: Optional[asyncio.AbstractEventLoop] = None
        self.episodes_done = 0
        self.episodes_total = 0
        self.turns: dict[str, int] = {}  # task_id -> turns its last episode took (replays start the longest first)

    def _spawn(self) -> Any:
        recent = sorted(n for n, t in self.suspect_nodes.items() if time.monotonic() - t < SUSPECT_NODE_S)
        options = actor_options(self.s, self.resource, recent)
        return self.executor.start(EnvWorker, options, self.env_name, self.env_cfg, self.gateway, self.owners)

    def _note_lost_node(self, idx: int) -> None:
        """Remember the node of a lost actor, when it is known, so its replacement goes elsewhere."""
        known, node = self.executor.done(self.actor_node_refs[idx])  # not known: it died before it said
        if known:
            self.suspect_nodes[node] = time.monotonic()

    def _slot_pool(self) -> Slots:
        """Free slots, bound to the running event loop."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots_loop = loop
            self._slots = Slots(len(self.actors), self.s.episodes_per_actor)
        return self._slots

    def _replace(self, idx: int, gen: int) -> None:
        if self.generation[idx] != gen:
            return  # another episode already replaced this actor
        self.executor.stop(self.actors[idx])
        self._note_lost_node(idx)
        self.actors[idx] = self._spawn()
        self.actor_node_refs[idx] = self.executor.call(self.actors[idx], "node")
        self.generation[idx] += 1
        self.replaced += 1

    async def _run_one(self, task: Task, skill: str, ctx: EpisodeContext) -> EpisodeResult:
        slots = self._slot_pool()
        last_error, kind = "", ""
        for attempt in range(self.s.episode_retries + 1):
            if attempt:
                self.retried_episodes += 1
            preferred = self.home.get(task.task_id)
            idx = await slots.take(preferred)
            self.affinity_hits += preferred == idx
            gen = self.generation[idx]
            try:
                # an episode the caller no longer needs, or one timed out, is cancelled on the actor too
                episode = self.executor.send(self.actors[idx], "play", (task, skill, ctx))
                data = await asyncio.wait_for(episode, timeout=self.s.episode_timeout_s)
                self.home[task.task_id] = idx
                return EpisodeResult.from_dict(data)
            except LLMError as e:
                if e.fatal:
                    raise  # endpoint down, budget, replay miss: the run must stop, not score zero
                last_error = f"llm: {e.message}"  # the message itself, not Ray's wrapper text
                kind = (
                    "llm_" + e.kind if isinstance(e, ReplyIncomplete) and e.kind in ("truncated", "filtered") else "llm"
                )
                if isinstance(e, LLMUnavailable):
                    # the client already spent its retry window on this endpoint: replaying the episode would only
                    # wait that long again (a dead endpoint then took three windows to stop the run), unlike an
                    # actor that died, which a fresh one replaces
                    break
            except NodeDataError as e:
                raise DataError(str(getattr(e, "cause", None) or e).strip().splitlines()[-1]) from None
            except TimeoutError:  # asyncio's, and Ray's GetTimeoutError
                last_error, kind = (
                    f"episode timed out after {self.s.episode_timeout_s:.0f}s (actor replaced)",
                    "timeout",
                )
                self._replace(idx, gen)
            except Exception as e:  # noqa: BLE001 - environment code failed; retried, then reported
                lost = ray_failure(e)
                if lost == "callee":  # raised inside the episode: the actor it called (the gateway) died
                    raise GatewayLost(
                        f"the LLM gateway actor died ({_first_line(e)}); no episode can reach the model: "
                        "rerun the same command to resume the run"
                    ) from None
                if lost == "actor":
                    last_error, kind = f"environment actor died: {_first_line(e)}", "actor_died"
                    self._replace(idx, gen)
                    continue
                cause = getattr(e, "cause", None) or e  # the environment's own exception, not Ray's wrapper
                name = getattr(cause, "type_name", "") or type(cause).__name__  # EpisodeCrash names the original
                last_error = f"{name}: {str(cause).splitlines()[-1][:300] if str(cause) else ''}"
                own_kind = getattr(cause, "kind", None)  # e.g. SandboxStartError's
                kind = str(own_kind) if own_kind in INFRA_KINDS else "env"
            finally:
                await slots.give(idx)
        return EpisodeResult(
            task.task_id, task.task_type, error=last_error, infra_error=True, fail_reason="infra_error", error_kind=kind
        )

    async def run(
        self,
        tasks: list[Task],
        skill: str,
        ctx: Union[EpisodeContext, list[EpisodeContext]],
        stop: Optional[Callable[[EpisodeResult], bool]] = None,
    ) -> list[EpisodeResult]:
        """One result per task, in task order. `ctx` is one context for all, or one per task (repeated rollouts
        of a task each have their own). `stop(result)` is asked after each episode; once it says
        True the episodes still running are cancelled on their actors and come back `not_played`."""
        ctxs = ctx if isinstance(ctx, list) else [ctx] * len(tasks)
        self.episodes_total = len(tasks)
        self.episodes_done = 0
        stopped = asyncio.Event()

        async def counted(t: Task, c: EpisodeContext) -> EpisodeResult:
            r = await self._run_one(t, skill, c)
            self.episodes_done += 1
            if not r.infra_error:
                self.turns[t.task_id] = r.n_turns
            if stop is not None and not stopped.is_set() and stop(r):
                stopped.set()
            return r

        # slots go to episodes in the order they were asked for
        started = {i: asyncio.ensure_future(counted(tasks[i], ctxs[i])) for i in start_order(tasks, self.turns)}
        jobs = [started[i] for i in range(len(tasks))]
        if stop is None:
            return list(await asyncio.gather(*jobs))
        waiter = asyncio.ensure_future(stopped.wait())
        pending: set[asyncio.Future[Any]] = set(jobs)
        try:
            while pending and not stopped.is_set():
                _, pending = await asyncio.wait(pending | {waiter}, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(waiter)
        finally:
            waiter.cancel()
        for j in jobs:
            if not j.done():
                j.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        # the cancels reached the actors: once run() returns, no cancelled episode makes another model call
        await self.executor.cancels_acknowledged()
        return [
            j.result()
            if not j.cancelled()
            else EpisodeResult(
                t.task_id, t.task_type, error="not played: the outcome was already decided", fail_reason=NOT_PLAYED
            )
            for j, t in zip(jobs, tasks)
        ]

    async def actor_nodes(self) -> list[str]:
        """The Ray node id each actor runs on (in actor order): the answers each actor gave when it was spawned."""
        return await self.executor.gather(self.actor_node_refs)

    async def actor_pids(self) -> list[int]:
        return await self.executor.gather(self.executor.call(a, "pid") for a in self.actors)

    async def memory_mb(self) -> list[float]:
        return await self.executor.gather(self.executor.call(a, "memory_mb") for a in self.actors)

    def shutdown(self) -> None:
        for a in self.actors:
            self.executor.stop(a)
