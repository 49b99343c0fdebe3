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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.lifeline import running, start_ticks

RECORD = "cluster.json"
UP_TIMEOUT_S = 180.0
DOWN_TIMEOUT_S = 30.0
POLL_S = 2.0


def home() -> Path:
    """Where the kept cluster's record lives (SKILLOPT_CLUSTER_HOME, for tests and benchmarks, or the user's cache)."""
    return Path(os.environ.get("SKILLOPT_CLUSTER_HOME") or Path.home() / ".cache" / "skillopt_ray" / "cluster")


@dataclass
class KeptCluster:
    """The holder process (pid and start ticks: a reused pid is another process) and how to reach its cluster."""

    pid: int
    start: str
    address: str
    temp_dir: str
    started_at: float
    idle_s: float
    num_cpus: int
    auth_mode: str

    def alive(self) -> bool:
        """The holder runs: not gone and not a zombie (a killed holder is one for 1.5-2 s; a run that attached to
        it then hung for minutes on the dead cluster)."""
        return running(self.pid, self.start)

    def answers(self, timeout_s: float = 2.0) -> bool:
        """The cluster's own answer: its GCS accepts a connection."""
        import socket

        host, _, port = self.address.rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            return False


def read_record(where: Optional[Path] = None) -> Optional[KeptCluster]:
    """The recorded cluster, or None (no record, or one this version cannot read)."""
    try:
        raw = json.loads(((where or home()) / RECORD).read_text(encoding="utf-8"))
        return KeptCluster(**raw)
    except (OSError, ValueError, TypeError):
        return None


def live(where: Optional[Path] = None) -> Optional[KeptCluster]:
    """The kept cluster when its holder is running, else None."""
    rec = read_record(where)
    return rec if rec is not None and rec.alive() else None


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def take_lease(pid: Optional[int] = None, where: Optional[Path] = None) -> None:
    """Mark the cluster in use for as long as process `pid` (default: this one) runs."""
    pid = os.getpid() if pid is None else pid
    ticks = start_ticks(pid)
    if ticks is not None:
        _write_atomic((where or home()) / "leases" / f"{pid}.json", json.dumps({"pid": pid, "start": ticks}))


def leased_by(where: Optional[Path] = None) -> list[int]:
    """The pids of the runs attached now; the leases of ended processes are removed."""
    pids = []
    for f in sorted(((where or home()) / "leases").glob("*.json")):
        try:
            raw = json.loads(f.read_text(encoding="utf-8"))
            ok = running(int(raw["pid"]), raw["start"])
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if ok:
            pids.append(int(raw["pid"]))
        else:
            f.unlink(missing_ok=True)
    return pids


def active_leases(where: Optional[Path] = None) -> int:
    """How many runs are attached now."""
    return len(leased_by(where))


def command_line(pid: int) -> str:
    """A process's command line, for a line that names it ("" when it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)[:200]


# ---------- the holder: the process that owns the cluster ----------


def _hold(args: argparse.Namespace) -> int:
    """Start the cluster and its run service, write the record, serve commands until `down` (SIGTERM) or the idle
    timeout, stop the cluster."""
    from skillopt_ray.service import Service, holder_environment

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
    import skillopt_ray.cli.app  # noqa: F401  (the commands it serves start from a loaded package)
    import skillopt_ray.driver  # noqa: F401

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
    _write_atomic(home() / RECORD, json.dumps(asdict(rec)))
    print(f"holder {rec.pid}: cluster at {rec.address}", flush=True)
    try:
        _serve_until_idle(service, stop, rec.idle_s)
    finally:
        service.close()
    print(f"holder {rec.pid}: stopping ({'asked to' if stop.is_set() else 'idle'})", flush=True)
    if read_record() == rec:
        (home() / RECORD).unlink(missing_ok=True)
    ray.shutdown()
    return 0


def _serve_until_idle(service: Any, stop: threading.Event, idle_s: float) -> None:
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


# ---------- the commands ----------


def _describe(rec: KeptCluster) -> str:
    idle = f"{rec.idle_s / 60:g} min"
    return f"Ray cluster kept up by pid {rec.pid} at {rec.address} ({rec.num_cpus} CPUs; stops after {idle} unused)"


def up(args: argparse.Namespace) -> int:
    rec = live()
    if rec is None:
        rec = _spawn_holder(args)
        if rec is None:
            return 1
        print(_describe(rec), file=sys.stderr)
    else:
        print(f"already up: {_describe(rec)}", file=sys.stderr)
    print("runs started now attach to it; stop it with: python -m skillopt_ray.cluster down", file=sys.stderr)
    if args.json:
        print(json.dumps(asdict(rec)))
    return 0


def _spawn_holder(args: argparse.Namespace) -> Optional[KeptCluster]:
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


def status(args: argparse.Namespace) -> int:
    rec = read_record()
    if rec is None or not rec.alive():
        print("no Ray cluster kept up (start one with: python -m skillopt_ray.cluster up)", file=sys.stderr)
        if args.json:
            print(json.dumps({}))
        return 0
    from skillopt_ray.service_client import service_status

    runs = active_leases()
    served = service_status() or {}
    spare = served.get("standby") or {"idle": 0, "ready": 0}
    serving = "; serving a run now" if served.get("busy") else ""
    print(
        f"{_describe(rec)}; {runs} run(s) attached now{serving}; {spare['ready']} of {spare['idle']} idle actors "
        "ready for the next command",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps({**asdict(rec), "runs": runs, "standby": spare, "busy": bool(served.get("busy"))}))
    return 0


def runs_using(rec: KeptCluster) -> list[str]:
    """The runs the cluster would take down with it, one description each: the command it serves, the attached."""
    from skillopt_ray.service_client import service_status

    served = (service_status() or {}).get("serving") or {}
    runs = []
    if served:
        runs.append(
            f"pid {served.get('pid')} (served: {' '.join(['python -m skillopt_ray', *served.get('argv', [])])})"
        )
    for pid in leased_by():
        if pid != served.get("pid"):
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
    sub = ap.add_subparsers(dest="command", required=True)
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
    return {"up": up, "status": status, "down": down, "_hold": _hold}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
