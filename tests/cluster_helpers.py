"""Shared by the kept-cluster tests: the cluster command and a command's environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _env(home: Path, **extra: str) -> dict[str, str]:
    """A command's environment with the kept cluster's record in `home` (tests/cluster/test_service.py uses it too): none of
    the settings that would keep a command from the cluster or make its environment differ from the holder's."""
    env = dict(os.environ, SKILLOPT_CLUSTER_HOME=str(home), RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "SKILLOPT_SERVICE", "SKILLOPT_STARTUP_TRACE", "PYTEST_CURRENT_TEST"):
        env.pop(name, None)
    env.update(extra)
    return env


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "skillopt_ray.cluster", *args],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )


def _free_ports(n: int) -> list[int]:
    from skillopt_ray.llm.embedded import free_port

    return [free_port() for _ in range(n)]


def head_pids(temp_dir: str) -> set[int]:
    """Our head's processes (their command lines name its private temp dir) and all their descendants."""
    table = _proc_table()
    me, mine = os.getpid(), set()
    while me in table and me not in mine:  # never ourselves or our ancestors (a shell may quote the path)
        mine.add(me)
        me = table[me][0]
    pids = {pid for pid, (_, cmd) in table.items() if temp_dir in cmd and pid not in mine}
    grew = True
    while grew:
        kids = {pid for pid, (ppid, _) in table.items() if ppid in pids} - pids
        pids |= kids
        grew = bool(kids)
    return pids - mine


def stop_by_pids(temp_dir: str) -> None:
    """Stop exactly the processes of our head. Never `ray stop`, which kills every Ray process on the machine."""
    pids = head_pids(temp_dir)
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and (pids & set(_proc_table())):
            time.sleep(0.2)
        pids &= set(_proc_table())
        if not pids:
            return


def wait_for_job_api(address: str, timeout_s: float = 90.0) -> None:
    """The dashboard answers before its job agent is ready: submit a no-op job until one succeeds."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client = JobSubmissionClient(address)
            job = client.submit_job(entrypoint="true")
            while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
                time.sleep(0.5)
            break
        except Exception:  # noqa: BLE001 - not ready yet
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
    # leave the job list to the test: the supervisor may write the record once more after SUCCEEDED
    gone_since = None
    while gone_since is None or time.monotonic() - gone_since < 3.0:
        if job in {j.submission_id for j in client.list_jobs()}:
            client.delete_job(job)
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        time.sleep(0.5)


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line), read from /proc."""
    table = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        table[int(d.name)] = (ppid, cmd)
    return table
