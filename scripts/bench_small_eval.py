"""A small chat eval, cold and warm, beside Ray's own floor measured in the same run.

    .venv/bin/python scripts/bench_small_eval.py                 # 3 rounds of 40 items, 1 s per call, 16 at a time
    .venv/bin/python scripts/bench_small_eval.py --rounds 5 --items 40 --latency 1.0 --concurrency 16

The job is what researchers run most while they iterate on a skill: an eval-only command on a chat benchmark
(your own tasks, `+experiment=custom`, one model call per item) against the scripted OpenAI-compatible server
(`tests/scripted_server.py`, answering after `--latency` seconds). Its latency bound is items x latency /
concurrency (40 x 1 s / 16 = 2.5 s). Each round measures, in fresh processes:

  floor  `ray.init()` with the options the CLI uses, then one remote task (command -> task result);
  lean floor  the same with the CLI's own start of a private cluster (no autoscaler monitor, log monitor or
         dashboard API server: skillopt_ray.base.private_apis.ray_init_lean);
  reference  the reference's way (scripts/bench_reference_pool.py): a plain thread pool of `--concurrency` SDK calls;
  local  the eval command on the one-process engine (`ray.mode=local`: no Ray at all);
  cold   the eval command starting its own private Ray cluster (`ray.mode=cluster`);
  warm   the same command while a cluster kept up by `python -m skillopt_ray.cluster up` is running: its holder
         runs the command (skillopt_ray/cluster/service.py) with idle copies of the previous run's actors (the cluster is
         started before the round, one unmeasured run leaves those copies, and it is stopped after the round);
  attached  then the same command with SKILLOPT_SERVICE=off: attached to that kept cluster as a Ray job of its
         own (what a warm run did before the run service), in the same round;
  local@NAME  with `--trees NAME=PATH,...`: the one-process command run from another checkout (PYTHONPATH=PATH),
         so a change and the commit before it are measured in the same rounds.

Each round runs them in that order, so every row of a round sees the same machine load; the ratios of the rows to
`reference` are printed too (a shared machine's absolute seconds drift, its ratios much less). For each: wall time (command -> exit), CPU time (the command and the processes it waited for), time to the first model call, both also as ratios to the floor, and the
peak resident memory of the run's processes (proportional set size, so pages shared between Ray's processes count
once; the warm figure adds the kept cluster's own processes). One unmeasured cold run comes first (MLflow store,
Python caches), as any earlier run on the machine would have made them. Medians are printed with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the scripted server, a test double, lives with the tests
sys.path.insert(0, str(REPO / "scripts"))

from bench_startup import floor, init_options  # noqa: E402  (after the path set-up above)


def write_tasks(folder: Path, items: int) -> Path:
    """`items` one-call chat tasks (all in the test split) and a skill file; returns the tasks file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tasks.jsonl"
    rows = [
        {"id": f"q{i:03d}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i), "split": "test"}
        for i in range(items)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "skill.md").write_text("# Skill\n\nAdd the numbers and answer with the sum alone.\n")
    return path


def reply(body: dict[str, Any], headers: dict[str, str]) -> str:
    """The scripted target: the sum the question asks for, so every item scores."""
    import re

    text = str(body["messages"][-1]["content"])
    m = re.search(r"What is (\d+) \+ (\d+)\?", text)
    return f"<answer>{int(m.group(1)) + int(m.group(2))}</answer>" if m else "<answer>?</answer>"


def child_env(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    env.update(extra or {})
    return env


def _pss_kb(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/smaps_rollup", encoding="ascii"):
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d.name))
    return kids


def tree(roots: list[int]) -> list[int]:
    """The processes under `roots` (Ray's raylet, GCS and workers are descendants of the process that started Ray)."""
    kids, out, todo = _children(), [], list(roots)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


class MemorySampler:
    """Peak summed PSS (MB) of the process trees under some roots, sampled every 0.2 s in a thread."""

    def __init__(self, roots: list[int]):
        self.roots = roots
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            total = sum(_pss_kb(p) for p in tree(self.roots)) / 1024.0
            self.peak_mb = max(self.peak_mb, total)
            self._stop.wait(0.2)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def reference_command(tasks: Path, srv_url: str, out_dir: Path, concurrency: int) -> list[str]:
    """The reference stand-in: a thread pool of model calls over the same tasks (scripts/bench_reference_pool.py)."""
    script = REPO / "scripts" / "bench_reference_pool.py"
    out = out_dir / "reference.json"
    return [
        sys.executable,
        str(script),
        str(tasks),
        str(tasks.parent / "skill.md"),
        srv_url,
        str(concurrency),
        str(out),
    ]


def eval_command(tasks: Path, srv_url: str, out_dir: Path, concurrency: int, mode: Optional[str] = None) -> list[str]:
    """The eval command; `mode` sets ray.mode (local | cluster | auto; None: the configured default)."""
    return [
        sys.executable,
        "-m",
        "skillopt_ray",
        "+experiment=custom",
        "mode=eval",
        f"env.data_dir={tasks}",
        f"eval.skill_path={tasks.parent / 'skill.md'}",
        "eval.split=test",
        "llm=compatible",
        f"llm.base_url={srv_url}",
        f"llm.target.max_concurrency={concurrency}",
        f"output_dir={out_dir}",
        "debug.progress=off",
        "resume=false",
        *([f"ray.mode={mode}"] if mode else []),
    ]


def run_eval(cmd: list[str], srv: Any, env: dict[str, str], extra_roots: list[int]) -> dict[str, Any]:
    """One eval command: wall and first-call seconds from the command, peak PSS of its processes, and the start-up
    marks (seconds from the command) when the environment asks for a trace."""
    before = len(srv.state.request_times)
    trace = env.get("SKILLOPT_STARTUP_TRACE")
    if trace:
        Path(trace).unlink(missing_ok=True)
    wall0, t0 = time.time(), time.monotonic()
    used0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with MemorySampler([p.pid, *extra_roots]) as mem:
        out, err = p.communicate(timeout=600)
    wall = time.monotonic() - t0
    used1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command and the children it waited for
    cpu = (used1.ru_utime - used0.ru_utime) + (used1.ru_stime - used0.ru_stime)
    if p.returncode:
        raise SystemExit(f"eval run failed ({p.returncode}): {err[-3000:]}")
    times = list(srv.state.request_times)[before:]
    if not times:
        raise SystemExit("the eval run made no model call")
    from skillopt_ray.base.startup_trace import read

    marks = read(trace, wall0) if trace else {}
    out_row = {"wall_s": wall, "first_call_s": times[0] - t0, "calls": len(times), "pss_mb": mem.peak_mb, "cpu_s": cpu}
    return {**out_row, "marks": marks}


def cluster(action: str, env: dict[str, str]) -> dict[str, Any]:
    """`python -m skillopt_ray.cluster <action> --json`: the kept cluster's record."""
    out = subprocess.run(
        [sys.executable, "-m", "skillopt_ray.cluster", action, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode:
        raise SystemExit(f"cluster {action} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def warm_round(cmd: list[str], srv: Any, env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keep a cluster up (in a state folder of this run's own), run the eval on it twice, measure the second, stop
    the cluster. The first run leaves the holder idle copies of its actors; the second starts once they are up
    (`cluster status` says so; the seconds that took are reported as `standby_s`), as a researcher's next
    command would find them. Then the same command once more with SKILLOPT_SERVICE=off: attached to the same
    cluster as a Ray job of its own (what a warm run did before the run service), in the same round."""
    rec = cluster("up", env)
    try:
        run_eval(cmd, srv, env, [int(rec["pid"])])
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            spare = cluster("status", env).get("standby") or {}
            if spare.get("idle") and spare.get("ready") == spare.get("idle"):
                break
            time.sleep(0.1)
        standby_s = time.monotonic() - t0
        served = {**run_eval(cmd, srv, env, [int(rec["pid"])]), "standby_s": standby_s}
        attached = run_eval(cmd, srv, dict(env, SKILLOPT_SERVICE="off"), [int(rec["pid"])])
        return served, attached
    finally:
        cluster("down", env)


def summarize(rows: list[dict[str, Any]], floors: list[float], lean: list[float]) -> dict[str, Any]:
    med: dict[str, Any] = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "marks"}
    labels = [m for m in rows[0]["marks"] if all(m in r["marks"] for r in rows)]
    med["marks"] = {m: statistics.median(r["marks"][m] for r in rows) for m in labels}
    if not floors:  # --no-floor
        return med
    med["wall_over_floor"] = statistics.median(r["wall_s"] / f for r, f in zip(rows, floors))
    med["first_call_over_floor"] = statistics.median(r["first_call_s"] / f for r, f in zip(rows, floors))
    med["first_call_minus_floor_s"] = statistics.median(r["first_call_s"] - f for r, f in zip(rows, floors))
    med["first_call_minus_lean_floor_s"] = statistics.median(r["first_call_s"] - f for r, f in zip(rows, lean))
    return med


def bench_parser(doc: Optional[str], rounds: int, latency: float) -> argparse.ArgumentParser:
    """The flags every benchmark against the scripted server has: its docstring as the help, how many rounds, the
    server's seconds per call, and a file for the raw numbers."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--latency", type=float, default=latency, help="seconds the scripted server takes per call")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    return ap


def main() -> None:
    ap = bench_parser(__doc__, rounds=3, latency=1.0)
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--no-warm", action="store_true", help="measure the cold path only")
    ap.add_argument(
        "--paths",
        default="reference,local,cold",
        help="which of reference, local, cold to run each round (comma-separated; warm/attached follow --no-warm)",
    )
    ap.add_argument("--no-floor", action="store_true", help="skip Ray's floors (a loaded machine may time them out)")
    ap.add_argument(
        "--trees",
        default="",
        help="NAME=PATH,...: also run the one-process command from these checkouts (PYTHONPATH=PATH) each round, "
        "as rows local@NAME: a change and the commit before it side by side (e.g. a `git worktree` of main)",
    )
    ap.add_argument(
        "--trace",
        action="store_true",
        help="also print where the seconds before the first call go (start-up marks; the warm runs then hand the "
        "trace file to the cluster's workers, which costs them a runtime environment)",
    )
    a = ap.parse_args()
    paths = set(a.paths.split(","))
    from scripted_server import ScriptedServer

    work = Path(tempfile.mkdtemp(prefix="bench_small_eval_"))
    tasks = write_tasks(work / "data", a.items)
    # the kept cluster's record lives in this run's own folder: a cluster someone else keeps up is not touched
    env = child_env({"SKILLOPT_CLUSTER_HOME": str(work / "cluster")})
    if a.trace:
        env["SKILLOPT_STARTUP_TRACE"] = str(work / "trace.txt")
    cold_env = dict(env, SKILLOPT_CLUSTER_HOME=str(work / "no-cluster"))
    opts = init_options(REPO)
    bound = a.items * a.latency / a.concurrency
    rows: dict[str, list[dict[str, Any]]] = {"reference": [], "local": [], "cold": [], "warm": [], "attached": []}
    trees = dict(kv.split("=", 1) for kv in a.trees.split(",") if kv)
    for name in trees:
        rows[f"local@{name}"] = []
    floors: list[float] = []
    lean_floors: list[float] = []
    load0 = os.getloadavg()[0]
    with ScriptedServer(policy=reply, latency_s=a.latency) as srv:
        cmd = eval_command(tasks, srv.base_url, work / "out", a.concurrency, "cluster")
        local_cmd = eval_command(tasks, srv.base_url, work / "out", a.concurrency, "local")
        ref_cmd = reference_command(tasks, srv.base_url, work, a.concurrency)
        run_eval(cmd if "cold" in paths else local_cmd, srv, cold_env, [])  # unmeasured: the MLflow store, caches
        run_eval(ref_cmd, srv, cold_env, [])
        for i in range(a.rounds):
            if not a.no_floor:
                floors.append(floor(REPO, opts))
                lean_floors.append(floor(REPO, opts, lean=True))
            for name, command in (("reference", ref_cmd), ("local", local_cmd), ("cold", cmd)):
                if name in paths:
                    rows[name].append(run_eval(command, srv, cold_env, []))
            for name, tree in trees.items():
                tree_env = dict(cold_env, PYTHONPATH=str(Path(tree).resolve()))
                if i == 0:  # unmeasured, as above: that tree's compose cache entry
                    run_eval(local_cmd, srv, tree_env, [])
                rows[f"local@{name}"].append(run_eval(local_cmd, srv, tree_env, []))
            if not a.no_warm:
                served, attached = warm_round(cmd, srv, env)
                rows["warm"].append(served)
                rows["attached"].append(attached)
            shown = "  ".join(
                f"{k}: wall {r[-1]['wall_s']:.2f}s first call {r[-1]['first_call_s']:.2f}s {r[-1]['pss_mb']:.0f} MB"
                for k, r in rows.items()
                if r
            )
            floored = f"floor {floors[-1]:.2f}s lean {lean_floors[-1]:.2f}s  " if floors else ""
            print(f"round {i + 1}: {floored}{shown}", flush=True)
    load1 = os.getloadavg()[0]
    print(
        f"\n{a.items} items x 1 call at {a.latency:g}s, {a.concurrency} at a time: bound {bound:.2f}s; medians of "
        f"{a.rounds} rounds; load average {load0:.1f} before, {load1:.1f} after, on {os.cpu_count()} CPUs"
    )
    if floors:
        print(f"floor (ray.init + one task) {statistics.median(floors):.2f} s")
        print(f"lean floor (the CLI's own start + one task) {statistics.median(lean_floors):.2f} s")
    result: dict[str, Any] = {
        "bound_s": bound,
        "floors_s": floors,
        "lean_floors_s": lean_floors,
        "load": [load0, load1],
        "init_options": opts,
    }
    for name, r in rows.items():
        if not r:
            continue
        m = summarize(r, floors, lean_floors)
        result[name] = {"rounds": r, "median": m}
        against = (
            f" ({m['first_call_over_floor']:.2f}x floor, {m['first_call_minus_floor_s']:+.2f} s; "
            f"{m['first_call_minus_lean_floor_s']:+.2f} s over the lean floor)"
            if floors
            else ""
        )
        print(
            f"{name:>9}: wall {m['wall_s']:.2f} s ({m['wall_s'] / bound:.2f}x bound"
            + (f", {m['wall_over_floor']:.2f}x floor" if floors else "")
            + f")  first call {m['first_call_s']:.2f} s{against}  resident {m['pss_mb']:.0f} MB  CPU {m['cpu_s']:.2f} s"
            + (f"  (idle actors up {m['standby_s']:.1f} s after the previous run)" if "standby_s" in m else "")
        )
        if name != "reference" and rows["reference"]:
            ref = rows["reference"]
            m["over_reference"] = {
                k: statistics.median(x[k] / y[k] for x, y in zip(r, ref)) for k in ("wall_s", "first_call_s", "pss_mb")
            }
            o = m["over_reference"]
            print(
                f"          over the reference, same round: wall {o['wall_s']:.2f}x  first call "
                f"{o['first_call_s']:.2f}x  resident {o['pss_mb']:.2f}x"
            )
        for label, at in sorted(m["marks"].items(), key=lambda kv: kv[1]):
            print(f"        {label:<22} {at:6.2f} s")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
