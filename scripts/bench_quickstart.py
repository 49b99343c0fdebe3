"""Time a quickstart (`python -m skillopt_ray +experiment=NAME +smoke=tiny`) and say where its minutes go.

    .venv/bin/python scripts/bench_quickstart.py                        # the flagship: alfworld
    .venv/bin/python scripts/bench_quickstart.py alfworld searchqa spreadsheetbench
    .venv/bin/python scripts/bench_quickstart.py alfworld --override env.max_turns=3

Each quickstart runs as a user runs it (a fresh output directory, the embedded model unless an override says
otherwise), with `debug.progress=plain` so every stage change prints a line. The script stamps each output line
with the time since the command started, samples the load average every 2 s, and afterwards reads:
  - the progress lines: wall-clock seconds per stage (summed over steps and epochs);
  - the ledger's journal (`ledger.journal.jsonl`: every call is journaled when sent and when answered): calls,
    seconds and tokens per role and stage, and the slowest call;
  - the start-up marks (skillopt_ray/base/startup_trace.py): seconds from the command to each mark;
  - the run directory: which loop stages were reached at least once;
  - /proc, every 2 s: the CPU seconds of every process the command started (the embedded model's server, Ray's
    own processes, each kind of actor), so the work can be told from the waiting.
The machine's load is printed beside every figure: on a shared machine the minutes say as much about the
other processes as about the run. The CPU seconds do not depend on the load: the embedded model runs one thread,
so its CPU seconds are about the wall time its calls need on a quiet core.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent

# the loop's stages, and how the run directory shows that each ran at least once
STAGES = ("rollout", "reflect", "aggregate", "select", "update", "gate", "slow update", "meta skill", "final test")


@dataclass
class Timed:
    """One quickstart command: its output lines with their times, its exit code, the load while it ran, the CPU
    seconds of its processes (pid -> (kind, seconds), the last sample of each)."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    code: int = 0
    wall_s: float = 0.0
    loads: list[float] = field(default_factory=list)
    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds so far) for every process /proc shows."""
    out: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()  # fields after the command name, from the state on
        out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK)
    return out


def _kind(pid: int) -> str:
    """What a process of the run is, from its command line (Ray workers title themselves ray::<Actor>.<method>)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if not cmd.strip():  # a process that has exited (a zombie) shows no command line
        return "gone"
    if "embedded_server" in cmd:
        return "embedded model server (llama.cpp, 1 thread)"
    m = re.match(r"ray::(\w+)", cmd)
    if m:
        return f"ray actor {m.group(1)}" if m.group(1) not in ("IDLE",) else "ray idle workers"
    if "skillopt_ray" in cmd and "-m" in cmd:
        return "CLI"
    return "ray system (gcs, raylet, dashboard, agents)"


def sample_cpu(root: int, into: dict[int, tuple[str, float]]) -> None:
    """Record the CPU seconds of `root` and all its descendants in `into`, with what each process is now."""
    table = _proc_table()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            kind = _kind(pid)  # asked again each time: a Ray worker takes its actor's title once it hosts one
            if kind == "gone" and pid in into:
                kind = into[pid][0]
            into[pid] = (kind, table[pid][1])
        todo.extend(children.get(pid, []))


def run_timed(cmd: list[str], env: dict[str, str], echo: bool) -> Timed:
    out = Timed()
    stop = threading.Event()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def sample() -> None:
        while not stop.is_set():
            out.loads.append(os.getloadavg()[0])
            sample_cpu(p.pid, out.cpu)
            stop.wait(2.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert p.stdout is not None
    for line in p.stdout:
        t = time.monotonic() - t0
        out.lines.append((t, line.rstrip("\n")))
        if echo:
            print(f"  {t:7.1f}s  {line.rstrip()}", flush=True)
    out.code = p.wait()
    out.wall_s = time.monotonic() - t0
    stop.set()
    sampler.join()
    return out


_PROGRESS = re.compile(r"^\[progress [^\]]*\] (?P<label>[^|]*)")


def stage_seconds(lines: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Seconds per stage label from the progress lines (epoch and step numbers dropped, so steps add up)."""
    marks: list[tuple[float, str]] = []
    for t, line in lines:
        m = _PROGRESS.match(line)
        if not m:
            continue
        label = re.sub(r"(epoch|step) \d+/\d+, ", "", m["label"].strip())
        if not marks or marks[-1][1] != label:
            marks.append((t, label))
    out: dict[str, float] = defaultdict(float)
    for (t, label), nxt in zip(marks, [*marks[1:], (end, "")]):
        out[label] += nxt[0] - t
    return dict(out)


@dataclass
class CallStats:
    calls: int = 0
    seconds: float = 0.0
    slowest: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def call_stats(journal: Path) -> dict[str, CallStats]:
    """Per role/stage: the calls sent, their summed and longest durations (journal time of the send to the time
    of the answer or error), and the tokens the ledger recorded."""
    sent: dict[str, tuple[str, float]] = {}
    stats: dict[str, CallStats] = defaultdict(CallStats)
    try:
        lines = journal.read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "p" in rec:
            sent[rec["p"]] = (rec["k"], rec["t"])
            continue
        if "d" in rec and rec["d"] in sent:
            key, t0 = sent.pop(rec["d"])
            s = stats[key]
            s.calls += 1
            dt = rec["t"] - t0
            s.seconds += dt
            s.slowest = max(s.slowest, dt)
        if "k" in rec and "v" in rec:
            s = stats[rec["k"]]
            s.prompt_tokens = rec["v"].get("prompt_tokens", 0)
            s.completion_tokens = rec["v"].get("completion_tokens", 0)
    return dict(stats)


def cpu_by_kind(cpu: dict[int, tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for kind, seconds in cpu.values():
        out[kind] += seconds
    return dict(out)


def stages_reached(rd: Path) -> dict[str, bool]:
    """Which loop stages left their record at least once (a record that says the stage was skipped does not count)."""

    def any_file(pattern: str, ok: Any = None) -> bool:
        for p in rd.glob(pattern):
            if ok is None:
                return True
            try:
                if ok(json.loads(p.read_text())):
                    return True
            except (OSError, ValueError):
                continue
        return False

    ran = {"inject_placeholder", "skip_first_epoch", "no_content"}
    return {
        "rollout": any_file("steps/*/rollout.json"),
        "reflect": any_file("steps/*/reflect.json", lambda d: d.get("calls", 0) > 0),
        "aggregate": any_file("steps/*/aggregate.json"),
        "select": any_file("steps/*/select.json"),
        "update": any_file("steps/*/update.json"),
        "gate": any_file("steps/*/gate.json", lambda d: str(d.get("action", "")).startswith(("accept", "reject"))),
        "slow update": any_file("epochs/*/slow_result.json", lambda d: d.get("action") not in ran),
        "meta skill": any_file("epochs/*/meta_skill_result.json", lambda d: d.get("action") not in ran),
        "final test": any_file("final/test_final.json"),
    }


def startup_marks(trace: Path, t0_wall: float) -> dict[str, float]:
    from skillopt_ray.base.startup_trace import read

    return read(str(trace), t0_wall)


def fmt_s(s: float) -> str:
    return f"{int(s // 60)} min {s % 60:4.1f} s" if s >= 60 else f"{s:.1f} s"


def bench(experiment: str, overrides: list[str], out_root: Path, echo: bool) -> dict[str, Any]:
    out_dir = out_root / experiment
    trace = out_root / f"{experiment}.startup_trace"
    cmd = [
        sys.executable,
        "-m",
        "skillopt_ray",
        f"+experiment={experiment}",
        "+smoke=tiny",
        f"output_dir={out_dir}",
        "debug.progress=plain",
        *overrides,
    ]
    env = dict(os.environ, SKILLOPT_STARTUP_TRACE=str(trace), RAY_USAGE_STATS_ENABLED="0")
    print(f"== {experiment}: {' '.join(cmd[1:])}", flush=True)
    load_before = os.getloadavg()
    t0_wall = time.time()
    timed = run_timed(cmd, env, echo)
    rd: Optional[Path] = None
    for _, line in timed.lines:
        if line.startswith("run directory: "):
            rd = Path(line[len("run directory: ") :].strip())
    summary_at = next((t for t, line in timed.lines if line.startswith("time: ")), timed.wall_s)
    loads = timed.loads or [load_before[0]]
    result: dict[str, Any] = {
        "experiment": experiment,
        "exit": timed.code,
        "wall_s": timed.wall_s,
        "summary_at_s": summary_at,
        "load_1min": {
            "before": load_before[0],
            "min": min(loads),
            "mean": sum(loads) / len(loads),
            "max": max(loads),
        },
        "stages_s": stage_seconds(timed.lines, summary_at),
        "cpu_s": cpu_by_kind(timed.cpu),
        "startup_s": startup_marks(trace, t0_wall),
        "run_dir": str(rd) if rd else None,
    }
    if rd is not None:
        result["calls"] = {k: vars(v) for k, v in sorted(call_stats(rd / "ledger.journal.jsonl").items())}
        result["reached"] = stages_reached(rd)
    result["tail"] = [line for _, line in timed.lines if not line.startswith("[progress")][-14:]
    return result


def report(r: dict[str, Any]) -> None:
    ld = r["load_1min"]
    print(
        f"\n{r['experiment']}: exit {r['exit']}, summary after {fmt_s(r['summary_at_s'])} "
        f"(command {fmt_s(r['wall_s'])}); 1-min load average {ld['before']:.1f} before, "
        f"{ld['min']:.1f}-{ld['max']:.1f} (mean {ld['mean']:.1f}) during, on {os.cpu_count()} cores"
    )
    reached = r.get("reached") or {}
    if reached:
        missing = [s for s in STAGES if not reached.get(s)]
        print("stages reached: " + ("all" if not missing else f"all but {', '.join(missing)}") + f" of {len(STAGES)}")
    print("\nwhere the minutes go (progress lines, summed over steps):")
    total = sum(r["stages_s"].values()) or 1.0
    for label, s in sorted(r["stages_s"].items(), key=lambda kv: -kv[1]):
        print(f"  {s:7.1f} s {100 * s / total:5.1f}%  {label}")
    cpu = r.get("cpu_s") or {}
    if cpu:
        print(f"\nCPU seconds of the command's processes ({sum(cpu.values()):.0f} s in all; sampled every 2 s):")
        for kind, sec in sorted(cpu.items(), key=lambda kv: -kv[1]):
            print(f"  {sec:7.1f} s  {kind}")
    calls = r.get("calls") or {}
    if calls:
        print("\nmodel calls (ledger journal; seconds from send to answer, concurrent calls overlap):")
        print(
            f"  {'role/stage':<26}{'calls':>6}{'sum s':>9}{'mean s':>8}{'max s':>8}{'prompt tok':>12}{'compl tok':>11}"
        )
        for k, c in sorted(calls.items(), key=lambda kv: -kv[1]["seconds"]):
            mean = c["seconds"] / c["calls"] if c["calls"] else 0.0
            print(
                f"  {k:<26}{c['calls']:>6}{c['seconds']:>9.1f}{mean:>8.1f}{c['slowest']:>8.1f}"
                f"{c['prompt_tokens']:>12}{c['completion_tokens']:>11}"
            )
    if r["startup_s"]:
        print("\nstart-up marks (s from the command):")
        for label, s in sorted(r["startup_s"].items(), key=lambda kv: kv[1])[:12]:
            print(f"  {s:7.1f}  {label}")
    print("\nend of the output:")
    for line in r["tail"]:
        print(f"  {line}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("experiments", nargs="*", default=["alfworld"], help="experiment presets (default: alfworld)")
    ap.add_argument("--override", action="append", default=[], help="KEY=VALUE added to every command")
    ap.add_argument("--out", default=None, help="where the runs go (default: a new temporary directory)")
    ap.add_argument("--echo", action="store_true", help="print the run's output as it comes, with times")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    out_root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_quickstart_"))
    out_root.mkdir(parents=True, exist_ok=True)
    results = []
    for exp in args.experiments:
        r = bench(exp, args.override, out_root, args.echo)
        report(r)
        results.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["exit"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
