"""The kept cluster's holder: the process that owns the Ray cluster `python -m skillopt_ray.cluster up` keeps, and
serves commands through its run service (skillopt_ray/cluster/service.py) until `down` or its idle time.

Started by executing the cluster command's own entry point (`python -m skillopt_ray.cluster _hold`), and running
served commands through the entry point the service names: nothing here imports a command.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any, Optional

from skillopt_ray.base.lifeline import start_ticks
from skillopt_ray.runs.kept_cluster import RECORD, KeptCluster, active_leases, home, read_record, write_atomic

UP_TIMEOUT_S = 180.0
POLL_S = 2.0


def hold(args: argparse.Namespace) -> int:
    """Start the cluster and its run service, write the record, serve commands until `down` (SIGTERM) or the idle
    timeout, stop the cluster."""
    from skillopt_ray.base.environ import holder_environment
    from skillopt_ray.cluster.service import Service, entry_main

    started_with = holder_environment()  # before anything below sets a variable: what the workers inherit
    # a cluster that outlives the command is a listener: Ray's token (~/.ray/auth_token, the user's own) guards it
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from skillopt_ray.cli.ray_session import COMMON_INIT

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    temp_dir = f"/tmp/skr{os.getuid()}"  # a Ray folder of its own: `address=auto` elsewhere never finds this cluster
    ray.init(
        **dict(COMMON_INIT, address="local", num_cpus=args.num_cpus, _temp_dir=temp_dir),
        object_store_memory=args.object_store_mb * 1024 * 1024,
    )

    entry_main()  # ... the command's entry point included, loaded by its name (see service.ENTRY)

    service = Service(home(), started_with)

    def on_term(*_: Any) -> None:
        stop.set()
        service.stop_run(
            f"the kept cluster (holder pid {os.getpid()}) is being stopped (`python -m skillopt_ray.cluster down`): "
            "this run stops now, its state saved"
        )

    signal.signal(signal.SIGTERM, on_term)
    rec = KeptCluster(
        pid=os.getpid(),
        start=str(start_ticks(os.getpid())),
        address=ray.get_runtime_context().gcs_address,
        temp_dir=temp_dir,
        started_at=time.time(),
        idle_s=args.idle_minutes * 60.0,
        num_cpus=args.num_cpus,
        auth_mode=os.environ["RAY_AUTH_MODE"],
    )
    write_atomic(home() / RECORD, json.dumps(asdict(rec)))
    print(f"holder {rec.pid}: cluster at {rec.address}", flush=True)
    try:
        serve_until_idle(service, stop, rec.idle_s)
    finally:
        service.close()
    print(f"holder {rec.pid}: stopping ({'asked to' if stop.is_set() else 'idle'})", flush=True)
    if read_record() == rec:
        (home() / RECORD).unlink(missing_ok=True)
    ray.shutdown()
    return 0


def serve_until_idle(service: Any, stop: threading.Event, idle_s: float) -> None:
    """Run the commands that ask; return when asked to stop, or when no run has been served or held a lease (an
    attached command's) for `idle_s` seconds."""
    last_used = time.monotonic()
    while not stop.is_set():
        if service.serve_next(POLL_S):
            last_used = time.monotonic()
        elif active_leases():
            last_used = time.monotonic()
        elif time.monotonic() - max(last_used, service.last_used) > idle_s:
            return


def spawn_holder(args: argparse.Namespace) -> Optional[KeptCluster]:
    """Start the holder in its own session (it outlives this command) and wait for its record."""
    h = home()
    h.mkdir(parents=True, exist_ok=True)
    h.chmod(0o700)  # the run service's socket lives here: the user's own
    (h / RECORD).unlink(missing_ok=True)
    log = open(h / "holder.log", "ab")
    cmd = [sys.executable, "-m", "skillopt_ray.cluster", "_hold", "--idle-minutes", str(args.idle_minutes)]
    cmd += ["--num-cpus", str(args.num_cpus), "--object-store-mb", str(args.object_store_mb)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        rec = read_record()
        if rec is not None and rec.pid == proc.pid:
            return rec
        if proc.poll() is not None:
            tail = (h / "holder.log").read_text(errors="replace").strip().splitlines()[-1:]
            print(f"error: the cluster did not start ({' '.join(tail)}); see {h / 'holder.log'}", file=sys.stderr)
            return None
        time.sleep(0.2)
    proc.terminate()
    print(f"error: the cluster did not start in {UP_TIMEOUT_S:.0f} s; see {h / 'holder.log'}", file=sys.stderr)
    return None
