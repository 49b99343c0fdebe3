"""Idle time in small jobs, on the one-process engine and on Ray, in the same rounds.

    .venv/bin/python scripts/bench_stalls.py                         # every kind, 1 round, 0.5 s per call
    .venv/bin/python scripts/bench_stalls.py --kinds train,eval --modes local,cluster --latency 0.2 --rounds 2

Each job runs against the scripted OpenAI-compatible server (`tests/scripted_server.py`, a target that always says
the same thing, analysts that plant one rule) with `ray.mode=<mode>`, the modes one after the other so both see the
same load. For each it prints the wall (command -> exit), the first model call, the idle gaps (spans from the
command's start to its exit with no model call in flight, a call being in flight from its arrival for `--latency`
seconds): before the first call, between calls (those over `--gap` s, their sum and the longest, with what the
start-up marks say came just before), and the tail (last reply -> exit). Kinds:

  train   `+experiment=custom` training on a few tasks (+smoke=tiny)
  eval    a custom eval of a few items
  night   `python -m skillopt_ray.sleep run` on a copy of examples/sleep-demo
  resume  the training command stopped by SIGINT after its first calls, then the same command again (the rerun is
          what is measured; the stop's SIGINT -> exit is printed too)
  again   the training command run to its end, then the same command again (what is measured: a finished run's
          command, which makes no model call)
  lmb, searchqa, docvqa, officeqa, ssb   a chat benchmark's eval on a few test items (offline data or samples)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "scripts"))

from bench_small_eval import bench_parser, child_env  # noqa: E402

BENCHES = {
    "lmb": "livemathematicianbench",
    "searchqa": "searchqa",
    "docvqa": "docvqa",
    "officeqa": "officeqa",
    "ssb": "spreadsheetbench",
}


def write_tasks(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {"id": f"{s}{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i), "split": s}
        for s, n in (("train", 4), ("selection", 2), ("test", 2))
        for i in range(n)
    ]
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "skill.md").write_text("# Skill\n\nAdd the numbers and answer with the sum alone.\n")
    return path


def command(kind: str, mode: str, url: str, work: Path, tasks: Path) -> tuple[list[str], Path]:
    py = [sys.executable, "-m", "skillopt_ray"]
    common = ["llm=compatible", f"llm.base_url={url}", f"ray.mode={mode}", "debug.progress=off"]
    out = work / f"out-{kind}-{mode}"
    if kind == "night":
        project = work / f"night-{mode}"
        shutil.rmtree(project, ignore_errors=True)
        shutil.copytree(REPO / "examples" / "sleep-demo", project, ignore=shutil.ignore_patterns(".skillopt"))
        cmd = [sys.executable, "-m", "skillopt_ray.sleep", "run", "--project", str(project), "--tasks",
               str(project / "tasks"), "llm=compatible", f"llm.base_url={url}", f"ray.mode={mode}"]  # fmt: skip
        return cmd, project
    if kind in ("train", "resume", "again"):
        return [*py, "+experiment=custom", "+smoke=tiny", f"env.data_dir={tasks}", "env.limit_train=2",
                f"output_dir={out}", *common], REPO  # fmt: skip
    if kind == "eval":
        return [*py, "+experiment=custom", "mode=eval", f"env.data_dir={tasks}", f"eval.skill_path={tasks.parent / 'skill.md'}",
                "eval.split=test", f"output_dir={out}", "resume=false", *common], REPO  # fmt: skip
    return [*py, f"+experiment={BENCHES[kind]}", "mode=eval", f"eval.skill_path={tasks.parent / 'skill.md'}",
            "eval.split=test", "env.limit_test=3", f"output_dir={out}", "resume=false", *common], REPO  # fmt: skip


def gaps(t0: float, t1: float, starts: list[float], latency: float) -> list[tuple[float, float]]:
    """Spans of [t0, t1] (seconds from t0) with no call in flight."""
    out, at = [], t0
    for s in sorted(starts):
        if s > at:
            out.append((at - t0, s - t0))
        at = max(at, s + latency)
    if t1 > at:
        out.append((at - t0, t1 - t0))
    return out


def run(cmd: list[str], cwd: Path, srv: Any, env: dict[str, str], stop_after: Optional[int] = None) -> dict[str, Any]:
    before = len(srv.state.request_times)
    trace = Path(env["SKILLOPT_STARTUP_TRACE"])
    trace.unlink(missing_ok=True)
    wall0, t0 = time.time(), time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if stop_after is not None:
        while len(srv.state.request_times) - before < stop_after and p.poll() is None:
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = p.communicate(timeout=1800)
    t1 = time.monotonic()
    if p.returncode and stop_after is None:  # said and counted, not fatal: the other jobs of the round still run
        print(f"{' '.join(cmd)} failed ({p.returncode}): {err.strip().splitlines()[-1:]}", flush=True)
    from skillopt_ray.base.startup_trace import read

    times = list(srv.state.request_times)[before:]
    marks = read(str(trace), wall0)
    return {
        "t0": t0,
        "t1": t1,
        "times": [t - t0 for t in times],
        "marks": marks,
        "rc": p.returncode,
        "stop_s": t1 - sent,
    }


def describe(r: dict[str, Any], latency: float, gap: float) -> str:
    times = r["times"]
    wall = r["t1"] - r["t0"]
    failed = f" FAILED (exit {r['rc']})" if r["rc"] else ""
    if not times:
        return f"wall {wall:.2f} s, no model call{failed}"
    g = gaps(0.0, wall, times, latency)
    inner = [x for x in g[1:-1] if x[1] - x[0] > gap] if len(g) > 2 else []
    tail = wall - (max(times) + latency)
    marks = sorted(r["marks"].items(), key=lambda kv: kv[1])

    def before(at: float) -> str:
        seen = [m for m, v in marks if v <= at + 0.05]
        return seen[-1] if seen else "-"

    shown = ", ".join(f"{a:.2f}-{b:.2f} (after {before(a)})" for a, b in sorted(inner, key=lambda x: x[0] - x[1])[:4])
    return (
        f"wall {wall:.2f} s, first call {times[0]:.2f} s, {len(times)} calls, idle between calls "
        f"{sum(b - a for a, b in inner):.2f} s in {len(inner)} gaps [{shown}], tail {tail:.2f} s{failed}"
    )


def main() -> None:
    ap = bench_parser(__doc__, rounds=1, latency=0.5)
    ap.add_argument("--kinds", default="train,eval,night,resume,again,lmb,searchqa,docvqa,officeqa,ssb")
    ap.add_argument("--modes", default="local,cluster")
    ap.add_argument("--gap", type=float, default=0.3, help="idle spans between calls shorter than this are not listed")
    ap.add_argument("--marks", action="store_true", help="print every start-up mark")
    ap.add_argument("--calls", action="store_true", help="print every model call's arrival, role and stage")
    ap.add_argument(
        "--trees",
        default="",
        help="name=path,... : checkouts whose code each job runs, one after the other (default: this one); e.g. "
        "before=/tmp/base (a `git archive` of an earlier commit),after=.",
    )
    a = ap.parse_args()
    from scripted_server import Policies, ScriptedServer

    trees = {k: Path(v).resolve() for k, v in (x.split("=", 1) for x in a.trees.split(",") if x)} or {"": REPO}
    work = Path(tempfile.mkdtemp(prefix="bench_stalls_"))
    tasks = write_tasks(work / "data")
    env = child_env(
        {
            "SKILLOPT_CLUSTER_HOME": str(work / "no-cluster"),
            "SKILLOPT_STARTUP_TRACE": str(work / "trace.txt"),
            "SKILLOPT_SHARED_DATA": os.environ.get("SKILLOPT_SHARED_DATA", "/work/shared/data"),
        }
    )
    results: list[dict[str, Any]] = []
    policies, seen = Policies(target="nonsense"), []

    def answer(body: dict[str, Any], headers: dict[str, str]) -> str:
        seen.append(
            (time.monotonic() - a.latency, headers.get("x-skillopt-role", ""), headers.get("x-skillopt-stage", ""))
        )
        return policies.answer(body, headers)

    with ScriptedServer(policy=answer, latency_s=a.latency) as srv:
        for i in range(a.rounds):
            for kind in a.kinds.split(","):
                for mode, (tree, code) in [(m, t) for m in a.modes.split(",") for t in trees.items()]:
                    env["PYTHONPATH"] = str(code)
                    cmd, cwd = command(kind, mode, srv.base_url, work, tasks)
                    cwd = code if cwd == REPO else cwd
                    if kind == "again":
                        shutil.rmtree(work / f"out-{kind}-{mode}", ignore_errors=True)
                        run(cmd, cwd, srv, env)
                    if kind == "resume":
                        shutil.rmtree(work / f"out-{kind}-{mode}", ignore_errors=True)
                        stopped = run(cmd, cwd, srv, env, stop_after=3)
                        print(f"r{i + 1} {kind:>8} {mode:>7} {tree}: SIGINT -> exit {stopped['stop_s']:.2f} s "
                              f"(exit code {stopped['rc']})", flush=True)  # fmt: skip
                    r = run(cmd, cwd, srv, env)
                    load = os.getloadavg()[0]
                    results.append({"round": i, "kind": kind, "mode": mode, "tree": tree, "load": load, **r})
                    print(
                        f"r{i + 1} {kind:>8} {mode:>7} {tree}: {describe(r, a.latency, a.gap)} (load {load:.1f})",
                        flush=True,
                    )
                    if a.calls:
                        for t, role, stage in sorted(x for x in seen if x[0] >= r["t0"] - a.latency):
                            print(f"      call {t - r['t0']:7.2f} {role}/{stage}")
                    seen.clear()
                    if a.marks:
                        for m, v in sorted(r["marks"].items(), key=lambda kv: kv[1]):
                            print(f"      {m:<28} {v:7.2f}")
                    if kind in ("train", "eval", "resume", "again") or kind in BENCHES:
                        shutil.rmtree(work / f"out-{kind}-{mode}", ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps({"latency": a.latency, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
