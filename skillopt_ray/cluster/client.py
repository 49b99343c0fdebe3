"""The command's side of the kept cluster's run service (skillopt_ray/cluster/service.py): hand the command to the holder.

Imports only the standard library and skillopt_ray.runs.kept_cluster (itself light), so that a command served by the holder
starts in tens of milliseconds. Returns None, and the command runs as it would have, whenever the service cannot
take it: no kept cluster, its socket not answering, another run in progress, an environment that differs, a
command that names its own Ray cluster (`ray.address`, RAY_ADDRESS), SKILLOPT_SERVICE=off, or a command that only
prints (help, `--cfg`, completion).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import sys
from typing import Any, NoReturn, Optional

from skillopt_ray.base.collector import imports_without_collector
from skillopt_ray.base.private_apis import python_exit_handlers
from skillopt_ray.cluster.wire import Frame, StatusAnswer
from skillopt_ray.runs.kept_cluster import home

SOCKET = "run.sock"  # the same name as service.SOCKET (that module imports the run's code: not imported here)
CONNECT_TIMEOUT_S = 2.0
PRINT_ONLY = {
    "-h",
    "--help",
    "--hydra-help",
    "--info",
    "-i",
    "-c",
    "--cfg",
    "-p",
    "--package",
    "-sc",
    "--shell-completion",
}


def wanted(argv: list[str], environ: dict[str, str]) -> bool:
    """Whether this command should be offered to the service at all."""
    if environ.get("SKILLOPT_SERVICE", "").lower() in ("off", "0", "false", "no"):
        return False
    if environ.get("RAY_ADDRESS") or environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        return False  # its own cluster, or a `ray job submit` entrypoint: the job runs where it was sent
    for arg in argv:
        if arg.split("=", 1)[0] in PRINT_ONLY or arg.split("=", 1)[0].lstrip("+~") == "ray.address":
            return False
        if arg.lstrip("+~") == "ray.mode=local":  # in this process: no cluster at all
            return False
    return True


def try_serve(argv: list[str]) -> Optional[int]:
    """The command's exit code when the holder ran it, or None when the command must run on its own."""
    if not wanted(argv, dict(os.environ)):
        return None
    path = home() / SOCKET
    if not path.exists():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(CONNECT_TIMEOUT_S)
    try:
        conn.connect(str(path))
        request = {
            "argv": argv,
            "argv0": sys.argv[0] if sys.argv else "",
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "tty": [sys.stdout.isatty(), sys.stderr.isatty()],
            "size": _terminal_size(),
        }
        conn.sendall((json.dumps(request) + "\n").encode())
        conn.settimeout(None)
    except OSError:
        conn.close()
        return None  # a stale socket (the holder was killed): run on its own
    with conn, _forward_signals(conn):
        return _relay(conn)


def service_status(timeout_s: float = 5.0) -> Optional[StatusAnswer]:
    """The run service's state (its idle actors, whether a run is in progress), or None when none answers."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout_s)
    try:
        with conn:
            conn.connect(str(home() / SOCKET))
            conn.sendall(b'{"status": true}\n')
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    return None
                data += chunk
        answer: StatusAnswer = json.loads(data)
        return answer
    except (OSError, ValueError):
        return None


def _terminal_size() -> list[int]:
    for stream in (sys.stderr, sys.stdout):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            size = os.get_terminal_size(stream.fileno())
            return [size.columns, size.lines]
    return []


def _relay(conn: socket.socket) -> Optional[int]:
    """Print what the run prints until its exit code arrives."""
    started = False
    buf = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            if not started:
                return None  # closed before answering: run on its own
            print(
                "error: the kept cluster's holder ended during the run; rerun the same command to resume "
                "(`python -m skillopt_ray.cluster status` says whether it is up)",
                file=sys.stderr,
            )
            return 1
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            frame: Frame = json.loads(line)
            if ("own" in frame or "refused" in frame) and not started:
                why = frame.get("own") or frame.get("refused")
                print(
                    f"note: the kept cluster's holder does not run this command ({why}): it runs here", file=sys.stderr
                )
                return None
            if "accepted" in frame:
                started = True
            elif "out" in frame:
                sys.stdout.write(frame["out"])
                sys.stdout.flush()
            elif "err" in frame:
                sys.stderr.write(frame["err"])
                sys.stderr.flush()
            elif "exit" in frame:
                return int(frame["exit"])


@contextlib.contextmanager
def _forward_signals(conn: socket.socket) -> Any:
    """Ctrl-C or SIGTERM here stops the run there (it saves its state, as a command's own run would)."""

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(OSError):
            conn.sendall((json.dumps({"signal": signum}) + "\n").encode())

    saved = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def command_main(argv: Optional[list[str]] = None) -> int:
    """`python -m skillopt_ray` and `skillopt-ray`: served by the kept cluster's holder when it can, else run here."""
    args = list(sys.argv[1:] if argv is None else argv)
    code = try_serve(args)
    if code is None:
        with imports_without_collector():
            from skillopt_ray.cli.app import main

        code = main(args)
    # the command is ending: Python's exit would collect every object of the thousands of modules a run imports
    # (MLflow, the OpenAI SDK: 1-2 s of CPU after the run is reported); frozen, they are left for the OS to free
    gc.freeze()
    return code


def command_exit() -> NoReturn:
    """`python -m skillopt_ray` and the `skillopt-ray` script: the command, then the process ends as Python's exit
    would (threads waited for, atexit handlers run, streams flushed) but without its last step, which frees every
    object of every module one by one: 0.1-0.3 s after a run that imported MLflow and the OpenAI SDK, for memory the
    OS takes back at once."""
    code = command_main()
    python_exit_handlers()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()  # type: ignore[union-attr]
    os._exit(code)
