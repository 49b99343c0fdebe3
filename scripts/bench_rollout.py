"""Rollout benchmark: our asynchronous env-actor pool vs the reference's lock-step chunks, side by side.

A scripted OpenAI-compatible server (localhost, fixed latency per call) replays each
game's walkthrough after `--wander` harmless steps. Both schemes play the same real
ALFWorld games through the same gateway actor and report:

- wall time, episodes per second;
- the model-latency bound: max(longest episode's calls x latency, all calls x latency / concurrency);
- bound / wall (1.0 = only waiting on the model);
- peak memory per env actor;
- the speed-up of the pool over lock-step.

Lock-step (the reference scheme): chunks of `--chunk` games, one process per game, rebuilt per
chunk; each turn waits for every game's model call, then steps every game.

`--compile-cache` sets the games' compile cache (SAS translations, grammars) for both schemes: `warm` (filled by
`skillopt_envs.alfworld.precompile` before the clock starts: every load after a game's first on a machine),
`cold` (empty, one per scheme: a game's first load) or `off`.

`--trace` adds where the pool's window went, per pass: the model's latency, the start, the per-step gaps, the
episode switches and the tail (see window_breakdown); `--no-lockstep` skips the lock-step scheme.

    python scripts/bench_rollout.py --games 32 --concurrency 16 --latency 0.1
    python scripts/bench_rollout.py --games 32 --concurrency 16 --latency 1.0 --trace --no-lockstep
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the scripted OpenAI-compatible server, a test double, lives with the tests

import ray  # noqa: E402
from scripted_server import Policies, ScriptedServer, alfworld_walkthroughs  # noqa: E402
from skillopt_envs.alfworld.data import walk_split  # noqa: E402
from skillopt_envs.alfworld.game import AlfWorldGame  # noqa: E402
from skillopt_envs.alfworld.protocol import Record, build_messages, goal_text, parse_reply  # noqa: E402
from skillopt_envs.base import EpisodeContext, Task  # noqa: E402
from skillopt_envs.chat import ChatRequest  # noqa: E402
from skillopt_envs.jsontypes import JSONObject  # noqa: E402

from skillopt_ray.engine.envpool import EnvPool, PoolSettings  # noqa: E402
from skillopt_ray.llm.gateway import GatewayActor  # noqa: E402

SKILL = "# skill\nReply with one admissible action."


@ray.remote(num_cpus=0)
class LockstepGame:
    """One game in its own process, as the reference runs it."""

    def __init__(self, gamefile: str, compile_cache_dir: Optional[str]):
        self.game = AlfWorldGame(gamefile, Path(compile_cache_dir) if compile_cache_dir else None)

    def reset(self) -> tuple[str, list[str]]:
        out = self.game.reset()
        return out.observation, out.admissible

    def step(self, action: str) -> tuple[str, bool, bool, list[str]]:
        out = self.game.step(action)
        return out.observation, out.done, out.won, out.admissible

    def memory_mb(self) -> float:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


async def lockstep(
    tasks: list[Task], gw, chunk: int, max_turns: int, compile_cache_dir: Optional[str]
) -> tuple[list[bool], list[int], float]:
    won_all: list[bool] = []
    calls_all: list[int] = []
    peak_mem = 0.0
    for start in range(0, len(tasks), chunk):
        group = tasks[start : start + chunk]
        # processes rebuilt per chunk (.remote comes from @ray.remote)
        actors = [LockstepGame.remote(t.payload["gamefile"], compile_cache_dir) for t in group]  # type: ignore[attr-defined]
        firsts = await asyncio.gather(*(a.reset.remote() for a in actors))
        goal = [goal_text(o) for o, _ in firsts]
        obs = [o for o, _ in firsts]
        adm = [a for _, a in firsts]
        hist: list[list[Record]] = [[] for _ in group]
        active = [True] * len(group)
        won = [False] * len(group)
        calls = [0] * len(group)
        for turn in range(max_turns):
            idx = [i for i in range(len(group)) if active[i]]
            if not idx:
                break
            replies = await asyncio.gather(
                *(
                    gw.chat.remote(
                        ChatRequest(
                            "target",
                            "rollout",
                            build_messages(SKILL, goal[i], hist[i], obs[i], adm[i], 2),
                            f"lockstep/{group[i].task_id}/t{turn}",
                        )
                    )
                    for i in idx
                )
            )
            for i in idx:
                calls[i] += 1
            commands = {i: parse_reply(r.content).command for i, r in zip(idx, replies)}
            steps = await asyncio.gather(*(actors[i].step.remote(commands[i]) for i in idx))
            for i, (o, done, w, a) in zip(idx, steps):
                hist[i].append(Record(obs[i], commands[i]))
                obs[i], adm[i] = o, a or adm[i]
                if w or done:
                    active[i] = False
                    won[i] = w
        mems = await asyncio.gather(*(a.memory_mb.remote() for a in actors))
        peak_mem = max([peak_mem, *mems])
        for a in actors:
            ray.kill(a)
        won_all += won
        calls_all += calls
    return won_all, calls_all, peak_mem


@dataclass
class CallLog:
    """When each model request reached the scripted server, by episode: the policy runs after the server's
    latency sleep, so the request arrived `latency` earlier."""

    latency: float
    calls: list[tuple[float, str]] = field(default_factory=list)  # (request time, sample key)

    def wrap(self, policies: Policies):
        def answer(body: dict[str, Any], headers: dict[str, str]) -> Any:
            self.calls.append((time.monotonic() - self.latency, headers.get("x-skillopt-key", "")))
            return policies.answer(body, headers)

        return answer

    def episodes(self, prefix: str) -> list[list[float]]:
        """Request times per episode whose key starts with `prefix`, each sorted, episodes by first request."""
        by_key: dict[str, list[float]] = {}
        for t, key in self.calls:
            if key.startswith(prefix):
                by_key.setdefault(re.sub(r"/t\d+$", "", key), []).append(t)
        return sorted((sorted(ts) for ts in by_key.values()), key=lambda ts: ts[0])


def window_breakdown(episodes: list[list[float]], t0: float, t1: float, latency: float, slots: int) -> dict[str, Any]:
    """Where the slot-seconds of a pass go, summed over the C slots and divided by C (so the parts add up to the
    wall time): the model's own latency, the start (before each slot's first request), the per-step gaps (a
    reply received to the next request: game step, prompt, gateway and Ray round trips), the switches (an
    episode's last reply to the next episode's first request on the freed slot) and the tail (slots idle after
    their last episode while others still play). Slots are matched greedily: an episode takes the slot that
    freed first."""
    gaps = [b - a - latency for ts in episodes for a, b in zip(ts, ts[1:])]
    free: list[float] = []  # end times of the slots' current episodes
    start = switch = 0.0
    switch_gaps: list[float] = []
    for ts in episodes:
        if len(free) < slots:
            start += ts[0] - t0
        else:
            gap = ts[0] - heapq.heappop(free)
            switch += gap
            switch_gaps.append(gap)
        heapq.heappush(free, ts[-1] + latency)
    tail = sum(t1 - end for end in free) + (slots - len(free)) * (t1 - t0)
    calls = sum(len(ts) for ts in episodes)
    ms = lambda xs, q: round(1000 * statistics.quantiles(xs, n=20)[q], 1) if len(xs) > 1 else 0.0  # noqa: E731
    return {
        "model_s": round(calls * latency / slots, 2),
        "start_s": round(start / slots, 2),
        "step_gaps_s": round(sum(gaps) / slots, 2),
        "switches_s": round(switch / slots, 2),
        "tail_s": round(tail / slots, 2),
        "first_request_s": round(min(ts[0] for ts in episodes) - t0, 2) if episodes else 0.0,
        "last_first_wave_request_s": round(sorted(ts[0] for ts in episodes)[:slots][-1] - t0, 2) if episodes else 0.0,
        "step_gap_ms_mean_p50_p95": [
            round(1000 * statistics.fmean(gaps), 1) if gaps else 0.0,
            ms(gaps, 9),
            ms(gaps, 18),
        ],
        "switch_gap_ms_mean": round(1000 * statistics.fmean(switch_gaps), 1) if switch_gaps else 0.0,
        "last_reply_to_end_s": round(t1 - max(ts[-1] + latency for ts in episodes), 2) if episodes else 0.0,
    }


def _process_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, first word of the command line, CPU seconds so far), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry)] = (int(fields[1]), cmd, (int(fields[11]) + int(fields[12])) / tick)
    return table


def _descends_from(pid: int, root: int, table: dict[int, tuple[int, str, float]]) -> bool:
    seen = 0
    while pid in table and seen < 64:
        if pid == root:
            return True
        pid, seen = table[pid][0], seen + 1
    return pid == root


def cpu_seconds_by_role() -> dict[str, float]:
    """CPU seconds so far of this benchmark's Ray actor processes by class (ray::EnvActor, ray::GatewayActor, ...)
    and of this process (the driver, which also hosts the scripted server), read from /proc. Only processes this one
    started (its local Ray node's workers descend from it): other Ray sessions on the machine are left out."""
    me = os.getpid()
    table = _process_table()
    out: dict[str, float] = {}
    for pid, (_, cmd, cpu) in table.items():
        if pid == me:
            role: Optional[str] = "driver+scripted_server"
        elif cmd.startswith("ray::") and _descends_from(pid, me, table):
            role = cmd.split(".")[0].split(":")[-1]
        else:
            role = None
        if role:
            out[role] = out.get(role, 0.0) + cpu
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--data", default=os.environ.get("ALFWORLD_DATA") or str(REPO.parent / "shared" / "data" / "alfworld")
    )
    ap.add_argument("--games", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--wander", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=8)
    ap.add_argument("--max-turns", type=int, default=50)
    ap.add_argument(
        "--passes",
        type=int,
        default=1,
        help="roll the same games out this many times (as every gate replays the selection split)",
    )
    ap.add_argument(
        "--compile-cache",
        choices=("warm", "cold", "off"),
        default="warm",
        help="compile cache: warm (precompiled before the clock), cold (empty) or off",
    )
    ap.add_argument(
        "--trace",
        action="store_true",
        help="also print where the pool's window goes (start, step gaps, switches, tail)",
    )
    ap.add_argument(
        "--no-lockstep", action="store_true", help="time only the pool (the lock-step scheme takes minutes)"
    )
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-compile-")

    root = Path(a.data)
    if not (root / "json_2.1.1").is_dir():
        from skillopt_envs.alfworld.samples import ensure_sample_games

        root = ensure_sample_games()
    tasks = walk_split(root, "all")
    tasks = (tasks * (a.games // len(tasks) + 1))[: a.games]
    # repeated games get distinct ids so every episode has its own script position
    tasks = [Task(f"{t.task_id}", t.task_type, t.payload) for t in tasks]
    walks = alfworld_walkthroughs(tasks)
    caches: dict[str, Optional[str]] = {"pool": None, "lockstep": None}
    if a.compile_cache != "off":
        caches = {k: str(Path(tmp.name) / k) for k in caches}
    if a.compile_cache == "warm":
        from skillopt_envs.alfworld.precompile import precompile

        caches["lockstep"] = caches["pool"]
        unique = sorted({t.payload["gamefile"] for t in tasks})
        print("precompiled:", precompile(unique, Path(caches["pool"] or ""), os.cpu_count() or 1), file=sys.stderr)

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        object_store_memory=200 * 1024 * 1024,
    )
    policies = Policies(walks, "walkthrough", wander=a.wander)
    log = CallLog(a.latency)
    srv = ScriptedServer(policies, latency_s=a.latency, policy=log.wrap(policies) if a.trace else None)
    srv.start()
    role = {
        "provider": "openai",
        "model": "scripted",
        "base_url": srv.base_url,
        "structured_output": "none",
        "max_concurrency": max(64, a.concurrency),
    }
    gw = GatewayActor.remote({"backend": "compatible", "target": role, "optimizer": role}, None, None)  # type: ignore[attr-defined]  # .remote comes from @ray.remote
    try:
        per_actor = max(1, a.concurrency // a.actors)
        options: JSONObject = {"compile_cache": caches["pool"] or "off"}
        pool = EnvPool(
            "alfworld",
            {"data_dir": str(root), "options": options},
            gw,
            PoolSettings(a.actors, per_actor, 0.0, 600.0, 1),
        )
        ray.get([act.pid.remote() for act in pool.actors])  # actors up before the clock starts
        cpu0 = cpu_seconds_by_role()
        t0 = time.monotonic()
        results = []
        windows = []
        for p in range(a.passes):
            t_pass = time.monotonic()
            results += asyncio.run(pool.run(tasks, SKILL, EpisodeContext(f"pool{p}", False, a.max_turns, 2)))
            if a.trace:
                episodes = log.episodes(f"pool{p}/")
                windows.append(window_breakdown(episodes, t_pass, time.monotonic(), a.latency, a.concurrency))
        pool_wall = time.monotonic() - t0
        cpu1 = cpu_seconds_by_role()
        pool_cpu = {k: round(v - cpu0.get(k, 0.0), 1) for k, v in cpu1.items() if v - cpu0.get(k, 0.0) > 0.05}
        pool_mem = max(asyncio.run(pool.memory_mb()))
        affinity_hits = pool.affinity_hits
        pool.shutdown()
        pool_turns = [r.n_turns for r in results]
        # no scheme beats the longest episode's model time, nor total model time spread over C slots
        bound = a.passes * max(max(pool_turns) * a.latency, sum(pool_turns) / a.passes * a.latency / a.concurrency)
        pool_won = sum(r.hard for r in results)

        t0 = time.monotonic()
        ls_won: list[bool] = []
        ls_mem = 0.0
        for _ in range(0 if a.no_lockstep else a.passes):
            won, _calls, mem = asyncio.run(lockstep(tasks, gw, a.chunk, a.max_turns, caches["lockstep"]))
            ls_won += won
            ls_mem = max(ls_mem, mem)
        ls_wall = time.monotonic() - t0
    finally:
        srv.stop()
        ray.shutdown()
        tmp.cleanup()

    out: dict[str, Any] = {
        "games": len(tasks),
        "passes": a.passes,
        "concurrency": a.concurrency,
        "latency_s": a.latency,
        "wander": a.wander,
        "cpus": os.cpu_count(),
        "compile_cache": a.compile_cache,
        "pool": {
            "wall_s": round(pool_wall, 2),
            "episodes_per_s": round(len(results) / pool_wall, 3),
            "won": pool_won,
            "latency_bound_s": round(bound, 2),
            "bound_over_wall": round(bound / pool_wall, 3),
            "peak_mem_mb_per_actor": round(pool_mem, 1),
            "replays_on_their_previous_actor": affinity_hits,
            "replays": len(tasks) * (a.passes - 1),
            "cpu_s_by_process": pool_cpu,
            "model_calls": sum(pool_turns),
            **({"window_by_pass": windows} if a.trace else {}),
        },
    }
    if not a.no_lockstep:
        out["lockstep"] = {
            "wall_s": round(ls_wall, 2),
            "episodes_per_s": round(len(ls_won) / ls_wall, 3),
            "won": sum(ls_won),
            "chunk": a.chunk,
            "peak_mem_mb_per_process": round(ls_mem, 1),
        }
        out["speedup_pool_over_lockstep"] = round(ls_wall / pool_wall, 2)
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
