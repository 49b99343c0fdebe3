"""ALFWorld's eval through the command, in the one-process engine and on Ray, in the same rounds.

    .venv/bin/python scripts/bench_alfworld_engines.py --latency 1.0 --rounds 2          # the sample games' test split
    .venv/bin/python scripts/bench_alfworld_engines.py --data ../shared/data/alfworld --split all   # 54 games

Why: `ray.mode=auto` keeps ALFWorld on Ray (`Benchmark.one_process = False`) because its games' steps run Python on
the CPU; this measures that choice. Each round runs the eval-only command (`+experiment=alfworld mode=eval` on
`--split`, at most `--games` of a test split; games missing from `--data` are skipped), the scripted server replaying each game's walkthrough after `--wander` wandering steps, `--latency` seconds
per call) with `ray.mode=local`, `ray.mode=cluster` and the default `auto` (whose first lines must say Ray), one after
the other, so each round's rows see the same machine load. Prints wall time, first model call, model calls, the
score and the peak resident memory (PSS) of each command's processes, with medians and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the scripted server, a test double, lives with the tests
sys.path.insert(0, str(REPO / "scripts"))

from bench_small_eval import MemorySampler, child_env  # noqa: E402  (after the path set-up above)


def eval_command(url: str, skill: Path, out: Path, a: argparse.Namespace, mode: str | None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "skillopt_ray",
        "+experiment=alfworld",
        "mode=eval",
        f"eval.skill_path={skill}",
        f"eval.split={a.split}",
        f"env.limit_test={a.games}",
        "env.options.skip_missing_games=true",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        "debug.progress=off",
        "resume=false",
        *([f"env.data_dir={a.data}"] if a.data else []),
        *([f"ray.mode={mode}"] if mode else []),
    ]


def run(cmd: list[str], srv: Any, env: dict[str, str]) -> dict[str, Any]:
    before = len(srv.state.request_times)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with MemorySampler([p.pid]) as mem:
        out, err = p.communicate(timeout=900)
    wall = time.monotonic() - t0
    if p.returncode:
        raise SystemExit(f"eval run failed ({p.returncode}): {err[-3000:]}")
    times = list(srv.state.request_times)[before:]
    engine = next((line for line in err.splitlines() if line.startswith("engine: ")), "?")
    score = next((line.split()[4] for line in (out + err).splitlines() if line.startswith("eval on ")), "?")
    return {
        "wall_s": wall,
        "first_call_s": times[0] - t0,
        "calls": len(times),
        "pss_mb": mem.peak_mb,
        "engine": engine,
        "hard": score,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--games", type=int, default=32)
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--wander", type=int, default=3)
    ap.add_argument("--data", default=None, help="ALFWorld data folder (default: the built-in sample games)")
    ap.add_argument("--modes", default="local,cluster,auto", help="which of local, cluster, auto to run each round")
    ap.add_argument("--split", default="test", help="the eval split (test, train, valid_seen, all, ...)")
    a = ap.parse_args()
    import skillopt_envs
    from scripted_server import Policies, ScriptedServer, alfworld_walkthroughs
    from skillopt_envs.base import EnvSettings

    env_cfg: EnvSettings = {
        "name": "alfworld",
        "data_dir": a.data,
        "manifest_dir": None,
        "options": {"skip_missing_games": True},
    }
    bench = skillopt_envs.make("alfworld", env_cfg)
    tasks = bench.load_split(a.split)
    tasks = tasks[: a.games] if a.split == "test" else tasks
    work = Path(tempfile.mkdtemp(prefix="bench_alfworld_engines_"))
    skill = work / "skill.md"
    skill.write_text(bench.seed_skill() or "# skill\n")
    env = child_env({"SKILLOPT_CLUSTER_HOME": str(work / "no-cluster")})
    modes = {k: v for k, v in {"local": "local", "cluster": "cluster", "auto": None}.items() if k in a.modes.split(",")}
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    load0 = os.getloadavg()[0]
    with ScriptedServer(Policies(alfworld_walkthroughs(tasks), wander=a.wander), latency_s=a.latency) as srv:
        run(eval_command(srv.base_url, skill, work / "out", a, next(iter(modes.values()))), srv, env)  # warm-up
        for i in range(a.rounds):
            for name, mode in modes.items():
                r = run(eval_command(srv.base_url, skill, work / "out", a, mode), srv, env)
                rows[name].append(r)
                print(
                    f"round {i + 1} {name:<7}: wall {r['wall_s']:6.2f}s  first call {r['first_call_s']:5.2f}s  "
                    f"{r['calls']} calls  hard {r['hard']}  {r['pss_mb']:.0f} MB  [{r['engine']}]",
                    flush=True,
                )
    print(
        f"\n{len(tasks)} ALFWorld games ({a.split}) at {a.latency:g}s per call (wander {a.wander}); medians of {a.rounds} rounds; "
        f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs"
    )
    for name, got in rows.items():
        med = {k: statistics.median(x[k] for x in got) for k in ("wall_s", "first_call_s", "pss_mb")}
        ray = rows.get("cluster") or got
        over = statistics.median(x["wall_s"] / y["wall_s"] for x, y in zip(got, ray))
        print(
            f"{name:>8}: wall {med['wall_s']:.2f} s ({over:.2f}x Ray's, same round)  first call "
            f"{med['first_call_s']:.2f} s  resident {med['pss_mb']:.0f} MB  [{got[-1]['engine']}]"
        )


if __name__ == "__main__":
    main()
