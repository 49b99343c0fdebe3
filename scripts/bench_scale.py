"""Throughput at scale: many concurrent one-call episodes through the env-actor pool and the LLM gateway.

A latency server (the scripted OpenAI-compatible server in its own process, `--latency` seconds per
call, replying with the request's sample key) answers the synthetic benchmark's episodes
(`envs/synthetic`, registered for tests and benchmarks only: each episode is `--calls` target calls
and nothing else). The pool holds `--episodes` slots (`--actors` x episodes/actor), so every episode
is in flight at once and the model-latency bound is `calls x latency`.

Reported, per measured pass (after one warm-up pass that starts the actors and opens connections):

- wall time of the pass and bound / wall (1.0 = only waiting on the model);
- calls per second through the gateway (calls the endpoint answered / wall);
- CPU seconds of the driver process (this one: the pool's scheduling and the results), the gateway
  actor(s), the env actors, the server, and Ray's own processes (raylet, GCS), over the pass, and the same
  per call (milliseconds);
- the load average before the run, since other work on the machine bounds a 2-core run too.

    python scripts/bench_scale.py --episodes 1000 --latency 1.0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from skillopt_envs.base import EnvSettings

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the scripted OpenAI-compatible server, a test double, lives with the tests

CLK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().decode("ascii", "replace").rsplit(")", 1)[-1].split()
    except OSError:
        return 0.0
    return (int(rest[11]) + int(rest[12])) / CLK


def ray_pids() -> list[int]:
    """The raylet and GCS processes of the cluster this process started (children of this process)."""
    me = os.getpid()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and (b"raylet" in cmd or b"gcs_server" in cmd):
            out.append(int(d.name))
    return out


def serve(latency: float) -> None:
    """The latency server: echo the sample key after `latency` seconds; prints its base URL."""
    import signal
    import threading

    from scripted_server import ScriptedServer

    srv = ScriptedServer(policy=lambda body, headers: f"ok {headers.get('x-skillopt-key', '')}", latency_s=latency)
    srv.state.bodies = _Discard()  # a 10k-call run need not keep every body
    print(srv.start(), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    srv.stop()


class _Discard(list):
    def append(self, _item: Any) -> None:  # noqa: D401 - a list that keeps nothing
        return None


def main() -> None:
    from skillopt_ray.config import LLMRoleConfig

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=1, help="target calls per episode")
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--actors", type=int, default=8)
    ap.add_argument("--passes", type=int, default=2, help="measured passes after the warm-up pass")
    ap.add_argument(
        "--gateway-shards",
        default="1",
        help="HTTP sender shards behind the gateway (ray.gateway_shards); "
        "a comma list compares them in one run (same cluster, same server)",
    )
    ap.add_argument(
        "--http-client",
        default=LLMRoleConfig.http_client,  # the runner's default, so the default figures are the runner's
        help=f"the SDK's HTTP transport (llm.<role>.http_client; the runner's default: {LLMRoleConfig.http_client}): "
        "httpx, aiohttp, or both, comma-separated, measured one after the other in this run",
    )
    ap.add_argument("--cache", action="store_true", help="with the response cache (record mode) in a temp run dir")
    ap.add_argument("--json", default=None, help="write the figures here too")
    ap.add_argument("--serve", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve is not None:
        serve(a.serve)
        return

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import tempfile

    import ray
    from skillopt_envs.base import EpisodeContext

    from skillopt_ray.engine.envpool import EnvPool, PoolSettings
    from skillopt_ray.llm import gateway as gwmod

    load = os.getloadavg()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(a.latency)], stdout=subprocess.PIPE, text=True)
    url = server.stdout.readline().strip()  # type: ignore[union-attr]
    tmp = tempfile.mkdtemp(prefix="bench_scale.")
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=128 * 1024 * 1024,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
        per_actor = -(-a.episodes // a.actors)
        env_cfg: EnvSettings = {"options": {"tasks": a.episodes, "calls": a.calls}}
        from skillopt_envs.synthetic.benchmark import SyntheticBenchmark

        tasks = SyntheticBenchmark(env_cfg).load_split("train")
        bound = a.calls * a.latency * max(1.0, a.episodes / (a.actors * per_actor))
        me = os.getpid()
        report = []
        for shards, transport in [
            (int(x), h) for x in str(a.gateway_shards).split(",") for h in a.http_client.split(",")
        ]:
            role = {
                "provider": "openai",
                "model": "scripted",
                "base_url": url,
                "structured_output": "none",
                "max_concurrency": a.episodes + 8,
                "http_client": transport,
            }
            llm_cfg = {
                "backend": "compatible",
                "target": role,
                "optimizer": role,
                "cache_mode": "record" if a.cache else "off",
            }
            run_dir = Path(tempfile.mkdtemp(prefix=f"s{shards}.", dir=tmp))
            gw = gwmod.GatewayActor.remote(  # type: ignore[attr-defined]  # .remote comes from @ray.remote
                llm_cfg,
                str(run_dir / "llm_cache.sqlite") if a.cache else None,
                str(run_dir / "ledger.json"),
                [],
                shards=shards,
            )
            pool = EnvPool("synthetic", env_cfg, gw, PoolSettings(a.actors, per_actor, 0.0, 600.0, 1))
            gw_pids = ray.get(gw.pids.remote())
            groups = {
                "driver": [me],
                "gateway": gw_pids[:1],
                "senders": gw_pids[1:],
                "env_actors": asyncio.run(pool.actor_pids()),
                "server": [server.pid],
                "ray": ray_pids(),
            }
            rows = []
            for p in range(a.passes + 1):
                before = {k: sum(cpu_s(x) for x in v) for k, v in groups.items()}
                led0 = ray.get(gw.ledger_snapshot.remote())
                t0 = time.monotonic()
                results = asyncio.run(
                    pool.run(tasks, "# skill", EpisodeContext(f"scale/s{shards}/p{p}", False, a.calls, 1))
                )
                wall = time.monotonic() - t0
                led = ray.get(gw.ledger_snapshot.remote())
                after = {k: sum(cpu_s(x) for x in v) for k, v in groups.items()}
                calls = led["totals"]["calls"] - led0["totals"]["calls"]
                row = {
                    "shards": shards,
                    "http_client": transport,
                    "pass": "warm-up" if p == 0 else p,
                    "wall_s": round(wall, 3),
                    "bound_s": bound,
                    "bound_over_wall": round(bound / wall, 3),
                    "calls": calls,
                    "calls_per_s": round(calls / wall, 1),
                    "episodes_ok": sum(r.hard == 1.0 for r in results),
                    "aligned": all(r.task_id == t.task_id for r, t in zip(results, tasks)),
                    "cpu_s": {k: round(after[k] - before[k], 2) for k in after},
                    "cpu_ms_per_call": {k: round(1000 * (after[k] - before[k]) / max(1, calls), 2) for k in after},
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
            pool.shutdown()
            ray.get(gw.close.remote())
            ray.kill(gw)
            measured = rows[1:] or rows
            best = max(measured, key=lambda r: r["bound_over_wall"])
            report.append({"shards": shards, "http_client": transport, "passes": rows, "best": best})
        print(
            f"\n{a.episodes} episodes x {a.calls} call(s) at {a.latency}s, {a.actors} actors x {per_actor} slots, "
            f"bound {bound:.2f}s, load average before {load[0]:.2f}"
        )
        print(
            f"{'shards':>6} {'client':>8} {'wall s':>8} {'bound/wall':>10} {'calls/s':>8} {'driver':>7} {'gateway':>8} {'senders':>8} "
            f"{'env act':>8} {'server':>7} {'ray':>5} {'gw ms/call':>10} {'env ms/call':>11}"
            "   (best measured pass; CPU seconds over the pass, then per call)"
        )
        for r in report:
            b = r["best"]
            c = b["cpu_s"]
            print(
                f"{r['shards']:>6} {r['http_client']:>8} {b['wall_s']:>8.2f} {b['bound_over_wall']:>10.3f} {b['calls_per_s']:>8.0f} {c['driver']:>7.2f} "
                f"{c['gateway']:>8.2f} {c['senders']:>8.2f} {c['env_actors']:>8.2f} {c['server']:>7.2f} {c['ray']:>5.2f}"
                f" {b['cpu_ms_per_call']['gateway']:>10.2f} {b['cpu_ms_per_call']['env_actors']:>11.2f}"
            )
        if a.json:
            Path(a.json).write_text(
                json.dumps(
                    {
                        "episodes": a.episodes,
                        "calls_per_episode": a.calls,
                        "latency_s": a.latency,
                        "actors": a.actors,
                        "slots": a.actors * per_actor,
                        "cache": a.cache,
                        "loadavg_before": [round(x, 2) for x in load],
                        "runs": report,
                    },
                    indent=2,
                )
            )
    finally:
        ray.shutdown()
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
