"""The kept cluster's record: what a run needs to attach to the cluster `python -m skillopt_ray.cluster up` keeps
(the holder's pid and address, whether it is alive, a lease for the run's life).

Light (the standard library and skillopt_ray.base.lifeline): a command offered to the holder's run service reads `home()` before anything heavy
loads. The holder process itself is skillopt_ray/cluster/holder.py; the command is skillopt_ray/cluster/command.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from skillopt_ray.base.lifeline import running, start_ticks

RECORD = "cluster.json"


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


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def take_lease(pid: Optional[int] = None, where: Optional[Path] = None) -> None:
    """Mark the cluster in use for as long as process `pid` (default: this one) runs."""
    pid = os.getpid() if pid is None else pid
    ticks = start_ticks(pid)
    if ticks is not None:
        write_atomic((where or home()) / "leases" / f"{pid}.json", json.dumps({"pid": pid, "start": ticks}))


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
