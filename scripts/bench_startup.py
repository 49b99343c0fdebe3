"""Start-up cost of the front door, measured beside Ray's own floor, in one run.

    .venv/bin/python scripts/bench_startup.py                  # 3 rounds, built-in sample games
    .venv/bin/python scripts/bench_startup.py --rounds 5 --data ../shared/data/alfworld
    .venv/bin/python scripts/bench_startup.py --baseline /tmp/older-checkout   # and an older tree, same rounds

Each round runs, in fresh processes and in this order:
  floor  `ray.init()` with the options the CLI uses, then one remote task (command -> task result);
  lean floor  the same with the CLI's own start of a private cluster (skillopt_ray.base.private_apis.ray_init_lean:
         no autoscaler monitor, log monitor or dashboard API server), which a run's first call is also set against;
  run    a 4-game ALFWorld eval-only command against the scripted server
         (`tests/scripted_server.py`, replaying each game's walkthrough):
         command -> first model call, and command -> exit.
One warm-up run comes first (not counted): it creates the MLflow store and fills the ALFWorld compile
cache, as any earlier run on the machine would have. Medians are printed, with the ratios to the floor
and the first call's distance from it (the target: within 1.5 s). With --baseline, each round also runs
the same eval from that checkout (e.g. `git archive <commit> | tar -x -C /tmp/old`), right after this
tree's, so both see the same machine load; the floor is measured once per round for both.
The run's processes mark where they are (skillopt_ray/base/startup_trace.py, SKILLOPT_STARTUP_TRACE): the
medians of those marks show where the seconds before the first call go. --override KEY=VALUE adds an
override to this tree's eval command (to compare a setting against the floor).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the environment this script was started with, taken before anything is imported: its child processes get this,
# not what its own imports set (making the ALFWorld sample games imports alfworld, which points ALFWORLD_DATA at an
# empty ~/.cache/alfworld; a run started with that variable would look for its games there and fail)
STARTED_WITH = dict(os.environ)

from skillopt_envs.base import EnvSettings  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the scripted OpenAI-compatible server, a test double, lives with the tests

FLOOR = r"""
import json, os, sys, time
import ray
opts = json.loads(sys.argv[1])
if sys.argv[2:] == ["lean"]:  # the CLI's own start: no monitors, no dashboard API server (private_apis.ray_init_lean)
    from skillopt_ray.base.private_apis import ray_init_lean

    ray_init_lean(**opts)
else:
    ray.init(**opts)
t_init = time.monotonic()
@ray.remote
def one():
    return 1
ray.get(one.remote())
print(json.dumps({"init": t_init, "task": time.monotonic()}), flush=True)
ray.shutdown()
"""


def init_options(repo: Path) -> dict:
    """The ray.init options of the checkout under test (its own function when it has one)."""
    code = (
        "import json; from skillopt_ray.cli.ray_session import local_init_options as f; "
        "print(json.dumps(f({'ray': {'num_cpus': None, 'object_store_memory_mb': 256}})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, env=child_env(repo), capture_output=True, text=True)
    if out.returncode == 0:
        return json.loads(out.stdout)
    # older checkouts: the options their cli.start_ray passed
    return dict(
        include_dashboard=False,
        log_to_driver=False,
        ignore_reinit_error=True,
        logging_level=logging.ERROR,
        num_cpus=os.cpu_count(),
        object_store_memory=256 * 1024 * 1024,
    )


@functools.cache
def import_path(repo: Path) -> str:
    """PYTHONPATH for a checkout: its folder, and for another checkout than the installed one also its own benchmarks
    under their package name (envs/ installs as skillopt_envs: without this link the installed tree's would load)."""
    if repo == REPO or not (repo / "envs").is_dir():
        return str(repo)
    links = Path(tempfile.mkdtemp(prefix="bench_startup_pkgs_"))
    (links / "skillopt_envs").symlink_to(repo / "envs")
    return os.pathsep.join((str(repo), str(links)))


def child_env(repo: Path) -> dict:
    """The environment the script started with, the checkout on the import path, and a Ray temp folder of our own
    (ray.init() in an older checkout would otherwise join a cluster `ray start` left)."""
    return dict(
        STARTED_WITH,
        PYTHONPATH=import_path(repo),
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_TMPDIR=f"/tmp/bsr{os.getpid()}",
    )


def floor(repo: Path, opts: dict, lean: bool = False) -> float:
    """Command -> one task's result: plain `ray.init` (Ray's floor), or with `lean` the CLI's own leaner start of a
    private cluster (a checkout that has one)."""
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", FLOOR, json.dumps(opts), *(["lean"] if lean else [])],
        cwd=repo,
        env=child_env(repo),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode:
        raise SystemExit(f"floor failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["task"] - t0


# where the seconds go, in order (skillopt_ray/base/startup_trace.py; an older checkout may have none of them)
MARKS = (
    "cli-started",
    "ray-starting",
    "ray-up",
    "driver-submitted",
    "driver-started",
    "benchmark-loaded",
    "env-actors-requested",
    "env-actor-started",
    "env-actor-ready",
    "gateway-started",
    "gateway-ready",
    "first-episode",
)


def eval_run(
    repo: Path, srv, skill: Path, out_dir: Path, data: str | None, overrides: tuple[str, ...] = ()
) -> tuple[float, float, dict[str, float]]:
    args = [
        sys.executable,
        "-m",
        "skillopt_ray",
        "+experiment=alfworld",
        "mode=eval",
        f"eval.skill_path={skill}",
        "eval.split=test",
        "env.limit_test=4",
        "llm=compatible",
        f"llm.base_url={srv.base_url}",
        f"output_dir={out_dir}",
        "debug.progress=off",
        "resume=false",
        *overrides,
    ]
    if data:
        args.append(f"env.data_dir={data}")
    before = len(srv.state.request_times)
    trace = out_dir.parent / f"{out_dir.name}-trace.txt"
    trace.unlink(missing_ok=True)
    env = dict(child_env(repo), SKILLOPT_STARTUP_TRACE=str(trace))
    wall0, t0 = time.time(), time.monotonic()
    p = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    end = time.monotonic() - t0
    if p.returncode:
        raise SystemExit(f"eval run failed ({p.returncode}): {p.stderr[-3000:]}")
    times = list(srv.state.request_times)[before:]
    if not times:
        raise SystemExit("the eval run made no model call")
    from skillopt_ray.base.startup_trace import read

    return times[0] - t0, end, read(str(trace), wall0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose CLI is measured (default: this one)")
    ap.add_argument("--baseline", type=Path, default=None, help="an older checkout measured in the same rounds")
    ap.add_argument("--data", default=None, help="ALFWorld data folder (default: the built-in sample games)")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    ap.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra override for this tree's eval command (repeatable), e.g. ray.num_cpus=4",
    )
    a = ap.parse_args()
    repo = a.repo.resolve()

    import skillopt_envs
    from scripted_server import Policies, ScriptedServer, alfworld_walkthroughs

    env_cfg: EnvSettings = {"name": "alfworld", "data_dir": a.data, "manifest_dir": None, "options": {}}
    bench = skillopt_envs.make("alfworld", env_cfg)
    tasks = bench.load_split("test")[:4]
    work = Path(tempfile.mkdtemp(prefix="bench_startup_"))
    skill = work / "skill.md"
    skill.write_text(bench.seed_skill() or "# skill\n")
    opts = init_options(repo)
    trees = {"this": repo, **({"baseline": a.baseline.resolve()} if a.baseline else {})}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with ScriptedServer(Policies(alfworld_walkthroughs(tasks))) as srv:
        print(f"ray.init options {opts}", flush=True)
        for name, tree in trees.items():  # warm-up: MLflow store, compile cache
            eval_run(tree, srv, skill, work / f"out-{name}", a.data, tuple(a.override) if name == "this" else ())
        marks: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for i in range(a.rounds):
            fl, lean = floor(repo, opts), floor(repo, opts, lean=True)
            for name, tree in trees.items():
                first, end, seen = eval_run(
                    tree, srv, skill, work / f"out-{name}", a.data, tuple(a.override) if name == "this" else ()
                )
                marks[name].append(seen)
                rows[name].append({"floor_s": fl, "lean_floor_s": lean, "first_call_s": first, "end_s": end})
                print(
                    f"round {i + 1} {name:<8}: floor {fl:.2f}s lean {lean:.2f}s  first model call {first:.2f}s  "
                    f"end {end:.2f}s",
                    flush=True,
                )
    print(f"\nmedians of {a.rounds} rounds (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs):")
    result = {}
    for name, tree in trees.items():
        med = {k: statistics.median(r[k] for r in rows[name]) for k in rows[name][0]}
        ratio = {
            f"{k}_over_floor": statistics.median(r[k] / r["floor_s"] for r in rows[name])
            for k in ("first_call_s", "end_s")
        }
        result[name] = {"repo": str(tree), "rounds": rows[name], "median": med, "ratios": ratio}
        print(f"{name} ({tree}):")
        print(f"  floor (ray.init + one task)   {med['floor_s']:6.2f} s")
        print(f"  lean floor (the CLI's start)  {med['lean_floor_s']:6.2f} s")
        print(
            f"  command -> first model call   {med['first_call_s']:6.2f} s   {ratio['first_call_s_over_floor']:.2f}x floor, "
            f"{med['first_call_s'] - med['floor_s']:+.2f} s; {med['first_call_s'] - med['lean_floor_s']:+.2f} s over "
            "the lean floor"
        )
        print(f"  command -> end (4 games)      {med['end_s']:6.2f} s   {ratio['end_s_over_floor']:.2f}x floor")
        phases = {m: statistics.median(r[m] for r in marks[name]) for m in MARKS if all(m in r for r in marks[name])}
        if phases:
            print(
                "  where the time to the first call goes (median seconds from the command; step from the previous mark):"
            )
            prev = 0.0
            for m, at in phases.items():
                print(f"    {m:<22} {at:6.2f} s   +{at - prev:.2f}")
                prev = at
            print(f"    {'first model call':<22} {med['first_call_s']:6.2f} s   +{med['first_call_s'] - prev:.2f}")
        result[name]["phases_s"] = phases
    if a.json:
        a.json.write_text(json.dumps({"init_options": opts, **result}, indent=1))


if __name__ == "__main__":
    main()
