"""A local Ray cluster kept up between runs, so that a small job does not pay Ray's start each time.

    python -m skillopt_ray.cluster up [--idle-minutes 20] [--num-cpus N] [--object-store-mb 256]
    python -m skillopt_ray.cluster status
    python -m skillopt_ray.cluster down

`up` starts one background process (the holder) that starts a private Ray cluster and keeps it until `down`,
or until no run has used it for `--idle-minutes`. While it is up, a run with no `ray.address` and no RAY_ADDRESS
attaches to it instead of starting its own (the CLI says so in one line). Nothing else is started or stopped: `down`
ends the holder by its pid (checked against its start time), and Ray's processes, which share its fate, end with it.
The record lives in SKILLOPT_CLUSTER_HOME (default ~/.cache/skillopt_ray/cluster): `cluster.json`, the holder's log,
and one lease file per run attached to it (a run's lease ends with its process; the idle clock starts then).
The record is skillopt_ray/runs/kept_cluster.py (what a run attaching reads), the holder skillopt_ray/cluster/holder.py; this is the
command.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from typing import Any, Optional

from skillopt_ray.cluster.holder import hold, spawn_holder
from skillopt_ray.runs.kept_cluster import (
    RECORD,
    KeptCluster,
    active_leases,
    command_line,
    home,
    leased_by,
    live,
    read_record,
)

DOWN_TIMEOUT_S = 30.0


# ---------- the commands ----------


def _describe(rec: KeptCluster) -> str:
    idle = f"{rec.idle_s / 60:g} min"
    return f"Ray cluster kept up by pid {rec.pid} at {rec.address} ({rec.num_cpus} CPUs; stops after {idle} unused)"


def up(args: argparse.Namespace) -> int:
    rec = live()
    if rec is None:
        rec = spawn_holder(args)
        if rec is None:
            return 1
        print(_describe(rec), file=sys.stderr)
    else:
        print(f"already up: {_describe(rec)}", file=sys.stderr)
    print("runs started now attach to it; stop it with: python -m skillopt_ray.cluster down", file=sys.stderr)
    if args.json:
        print(json.dumps(asdict(rec)))
    return 0


def status(args: argparse.Namespace) -> int:
    rec = read_record()
    if rec is None or not rec.alive():
        print("no Ray cluster kept up (start one with: python -m skillopt_ray.cluster up)", file=sys.stderr)
        if args.json:
            print(json.dumps({}))
        return 0
    from skillopt_ray.cluster.client import service_status

    runs = active_leases()
    served = service_status()
    spare = (served.get("standby") if served else None) or {"idle": 0, "ready": 0}
    busy = bool(served and served.get("busy"))
    serving = "; serving a run now" if busy else ""
    print(
        f"{_describe(rec)}; {runs} run(s) attached now{serving}; {spare['ready']} of {spare['idle']} idle actors "
        "ready for the next command",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps({**asdict(rec), "runs": runs, "standby": spare, "busy": busy}))
    return 0


def runs_using(rec: KeptCluster) -> list[str]:
    """The runs the cluster would take down with it, one description each: the command it serves, the attached."""
    from skillopt_ray.cluster.client import service_status

    answer = service_status()
    served = answer["serving"] if answer else None
    runs = []
    if served:
        runs.append(
            f"pid {served.get('pid')} (served: {' '.join(['python -m skillopt_ray', *served.get('argv', [])])})"
        )
    for pid in leased_by():
        if pid != (served.get("pid") if served else None):
            runs.append(f"pid {pid} (attached: {command_line(pid) or '?'})")
    return runs


def down(args: argparse.Namespace) -> int:
    rec = read_record()
    runs = runs_using(rec) if rec is not None and rec.alive() else []
    if runs and not args.force:
        print(
            f"error: the kept cluster is running {len(runs)} run(s): {'; '.join(runs)}. Stopping it ends them (each "
            "resumes with its own command); stop it anyway with: python -m skillopt_ray.cluster down --force",
            file=sys.stderr,
        )
        return 2
    if rec is None or not rec.alive():
        (home() / RECORD).unlink(missing_ok=True)
        print("no Ray cluster kept up: nothing to stop", file=sys.stderr)
    else:
        if runs:
            print(f"stopping the kept cluster ends {len(runs)} run(s): {'; '.join(runs)}", file=sys.stderr)
        os.kill(rec.pid, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_TIMEOUT_S
        while rec.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if rec.alive():
            os.kill(rec.pid, signal.SIGKILL)  # Ray's processes share its fate
        (home() / RECORD).unlink(missing_ok=True)
        print(f"stopped the Ray cluster kept up by pid {rec.pid}", file=sys.stderr)
    if args.json:
        print(json.dumps({"stopped": rec is not None}))
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m skillopt_ray.cluster", description=__doc__.split("\n\n")[0])
    # `_hold` is the holder's own entry point (spawn_holder): not offered to users
    sub = ap.add_subparsers(dest="command", required=True, metavar="{up,status,down}")
    for name, text in (
        ("up", "start a cluster kept up between runs"),
        ("status", "say whether one is up"),
        ("down", "stop it"),
        ("_hold", argparse.SUPPRESS),
    ):
        p = sub.add_parser(name, help=text) if name != "_hold" else sub.add_parser(name)
        p.add_argument("--json", action="store_true", help="also print the record as JSON on stdout")
        if name == "down":
            p.add_argument("--force", action="store_true", help="stop it even while runs use it (they end)")
        if name in ("up", "_hold"):
            p.add_argument("--idle-minutes", type=_positive, default=20.0, help="stop after this long unused")
            p.add_argument("--num-cpus", type=int, default=os.cpu_count() or 1)
            p.add_argument("--object-store-mb", type=int, default=256)
    return ap


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of minutes")
    return value


def main(argv: Optional[list[str]] = None) -> int:
    args: Any = parser().parse_args(argv)
    return {"up": up, "status": status, "down": down, "_hold": hold}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
