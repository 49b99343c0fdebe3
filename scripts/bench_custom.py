"""Throughput of an evaluation on your own tasks (`+experiment=custom`, a JSONL file) next to SearchQA's, through the
same env-actor pool, gateway and latency server as scripts/bench_scale.py.

Each benchmark evaluates `--tasks` one-call tasks (a JSONL file scored by exact match; SearchQA items from a data
folder's own splits) with every task in flight at once, so the model-latency bound is one call's latency. Reported per
latency and benchmark, for the best measured pass after a warm-up pass: the wall time, bound / wall (1.0 = only
waiting on the model), calls per second, and the CPU seconds of the driver (this process), the gateway, the env
actors and the server over the pass.

    python scripts/bench_custom.py --tasks 1000 --latency 0.1,1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from skillopt_envs.base import EnvSettings

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "tests"))  # the scripted server, a test double, lives with the tests

from bench_scale import cpu_s  # noqa: E402 - after the path set-up


def write_data(root: Path, n: int) -> dict[str, EnvSettings]:
    """A JSONL task file and a SearchQA data folder of `n` test tasks each (plus one train and one val task, which
    the benchmarks ask for); returns each benchmark's env config."""
    rows = [{"id": f"c{i}", "prompt": f"Question {i}?", "answer": f"a{i}", "split": "test"} for i in range(n)]
    rows += [{"id": f"c-{s}", "prompt": "q?", "answer": "a", "split": s} for s in ("train", "val")]
    (root / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    context = "[DOC] [TLE] A title [PAR] Some passage text that says what the answer is. " * 4
    items = {
        "test": [
            {"id": f"s{i}", "question": f"Question {i}?", "context": context, "answers": [f"a{i}"]} for i in range(n)
        ]
    }
    items["train"] = [{"id": "s-train", "question": "q?", "context": context, "answers": ["a"]}]
    items["val"] = [{"id": "s-val", "question": "q?", "context": context, "answers": ["a"]}]
    for split, part in items.items():
        (root / "qa" / split).mkdir(parents=True)
        (root / "qa" / split / "items.json").write_text(json.dumps(part))
    return {
        "custom": {"name": "custom", "data_dir": str(root / "tasks.jsonl"), "options": {}},
        "searchqa": {"name": "searchqa", "data_dir": str(root / "qa"), "options": {"split_source": "folders"}},
    }


def start_server(latency: float) -> tuple[subprocess.Popen, str]:
    """bench_scale.py's latency server in its own process: replies with the sample key after `latency` seconds."""
    server = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "bench_scale.py"), "--serve", str(latency)],
        stdout=subprocess.PIPE,
        text=True,
    )
    return server, server.stdout.readline().strip()  # type: ignore[union-attr]


def measure(bench: str, env_cfg: EnvSettings, url: str, a: argparse.Namespace, server_pid: int) -> dict[str, Any]:
    """Warm-up pass, then `a.passes` measured passes of the test split; the best measured pass."""
    import ray
    from skillopt_envs import make
    from skillopt_envs.base import EpisodeContext

    from skillopt_ray.engine.envpool import EnvPool, PoolSettings
    from skillopt_ray.llm import gateway as gwmod

    tasks = make(bench, env_cfg).load_split("test")
    role = {"provider": "openai", "model": "scripted", "base_url": url, "structured_output": "none",
            "max_concurrency": len(tasks) + 8}  # fmt: skip
    llm_cfg = {"backend": "compatible", "target": role, "optimizer": role, "cache_mode": "off"}
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench_custom.{bench}."))
    gw = gwmod.GatewayActor.remote(llm_cfg, None, str(run_dir / "ledger.json"), [])  # type: ignore[attr-defined]
    per_actor = -(-len(tasks) // a.actors)
    pool = EnvPool(bench, env_cfg, gw, PoolSettings(a.actors, per_actor, 0.0, 600.0, 1))
    groups = {"driver": [os.getpid()], "gateway": ray.get(gw.pids.remote())[:1],
              "env_actors": asyncio.run(pool.actor_pids()), "server": [server_pid]}  # fmt: skip
    rows = []
    for p in range(a.passes + 1):
        before = {k: sum(cpu_s(x) for x in v) for k, v in groups.items()}
        led0 = ray.get(gw.ledger_snapshot.remote())
        t0 = time.monotonic()
        results = asyncio.run(pool.run(tasks, "# skill", EpisodeContext(f"bench/{bench}/p{p}", False, 1, 0)))
        wall = time.monotonic() - t0
        calls = ray.get(gw.ledger_snapshot.remote())["totals"]["calls"] - led0["totals"]["calls"]
        after = {k: sum(cpu_s(x) for x in v) for k, v in groups.items()}
        rows.append({"pass": "warm-up" if p == 0 else p, "wall_s": round(wall, 3),
                     "bound_over_wall": round(a.latency_now / wall, 3), "calls": calls,
                     "calls_per_s": round(calls / wall, 1), "scored": sum(r.scored for r in results),
                     "cpu_s": {k: round(after[k] - before[k], 2) for k in after},
                     "loadavg_1m": round(os.getloadavg()[0], 2)})  # fmt: skip
        print(json.dumps({"benchmark": bench, "latency_s": a.latency_now, **rows[-1]}), flush=True)
    pool.shutdown()
    ray.get(gw.close.remote())
    ray.kill(gw)
    return max(rows[1:] or rows, key=lambda r: r["bound_over_wall"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--latency", default="0.1,1", help="seconds per call, a comma list")
    ap.add_argument("--actors", type=int, default=8)
    ap.add_argument("--passes", type=int, default=2, help="measured passes after the warm-up pass")
    ap.add_argument("--benchmarks", default="custom,searchqa")
    ap.add_argument("--json", default=None, help="write the figures here too")
    a = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    load = os.getloadavg()
    cfgs = write_data(Path(tempfile.mkdtemp(prefix="bench_custom.")), a.tasks)
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 1024 * 1024, log_to_driver=False,
             logging_level=logging.ERROR)  # fmt: skip
    report = []
    try:
        for latency in [float(x) for x in a.latency.split(",")]:
            a.latency_now = latency
            server, url = start_server(latency)
            try:
                for bench in a.benchmarks.split(","):
                    report.append(
                        {"benchmark": bench, "latency_s": latency, **measure(bench, cfgs[bench], url, a, server.pid)}
                    )
            finally:
                server.terminate()
                server.wait(10)
    finally:
        ray.shutdown()
    print(f"\n{a.tasks} tasks, one call each, all in flight; {a.actors} env actors; load average before {load[0]:.2f}")
    print(
        f"{'benchmark':>10} {'latency':>8} {'wall s':>8} {'bound/wall':>10} {'calls/s':>8} {'driver':>7} {'gateway':>8} {'env act':>8} {'server':>7}"
    )
    for r in report:
        c = r["cpu_s"]
        print(f"{r['benchmark']:>10} {r['latency_s']:>8g} {r['wall_s']:>8.2f} {r['bound_over_wall']:>10.3f} {r['calls_per_s']:>8.0f} "
              f"{c['driver']:>7.2f} {c['gateway']:>8.2f} {c['env_actors']:>8.2f} {c['server']:>7.2f}")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps({"tasks": a.tasks, "loadavg_before": load, "runs": report}, indent=2))


if __name__ == "__main__":
    main()
