"""The kept cluster's run service: the holder runs `python -m skillopt_ray ...` commands for their processes.

A command run on the machine of a kept cluster (`python -m skillopt_ray.cluster up`) pays, before its first model
call, for Python importing Ray, Hydra and this package, for joining the cluster as a new Ray job, and for every
actor's new worker process importing the same again: seconds, for a job whose model calls may take two. The holder
has all of that loaded already. So the command (skillopt_ray/cluster/client.py, which imports nothing heavy) sends
its arguments, working folder and environment over a Unix socket, and the holder runs the command's `main()` in its
own process: it composes the config, writes the run directory and adopts its idle standby actors
(skillopt_ray/engine/warm.py). Everything the run prints is relayed back; the command exits with the run's exit code.

Who may ask: the socket lives in the cluster's record folder (mode 0700) and the holder checks the caller's uid
(SO_PEERCRED) against its own. The caller's environment must equal the holder's, apart from what a shell changes
on its own (PWD, SHLVL, a session's SSH_*, ...), a pyenv shim's PYENV_* and PATH folders, and Ray's own settings
(RAY_*: how a command would join the cluster), since the run's actors inherit the holder's: a command whose environment differs
(another API key, a data variable set since `up`) is told to run as it would without the service, and does.
One run at a time: a command that arrives while another runs is told to run on its own, attached to the cluster.
Ctrl-C (or SIGTERM) in the command stops the run as it would stop a command's own; a command killed outright
ends the run too: its actors watch the command's process (skillopt_ray/base/lifeline.py).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TextIO

from skillopt_ray.cluster.wire import Serving, StatusAnswer

if TYPE_CHECKING:
    from skillopt_ray.config.schema import Config

from skillopt_ray.base.environ import env_difference
from skillopt_ray.base.folder import in_folder
from skillopt_ray.base.startup_trace import ENV as TRACE_ENV
from skillopt_ray.engine.warm import StandbyPool, serve

SOCKET = "run.sock"
# the entry point a served command runs: `python -m skillopt_ray`'s own, named rather than imported (the holder sits
# beneath the commands and runs one by its name, as `python -m` would)
ENTRY = "skillopt_ray.cli.app"
MAX_REQUEST_BYTES = 4 * 1024 * 1024


def entry_main() -> Callable[[list[str]], int]:
    """The `main(argv)` of the command's entry point (ENTRY), loaded on first use."""
    main: Callable[[list[str]], int] = importlib.import_module(ENTRY).main
    return main


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket, from the kernel."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


class Relay:
    """A text stream whose writes go to the command as frames; what is written after the command left is dropped."""

    def __init__(self, conn: socket.socket, channel: str, tty: bool, lock: threading.Lock):
        self.conn, self.channel, self.tty, self.lock = conn, channel, tty, lock
        self.closed = False

    def write(self, text: str) -> int:
        if text and not self.closed:
            frame = (json.dumps({self.channel: text}) + "\n").encode()
            with self.lock:
                try:
                    self.conn.sendall(frame)
                except OSError:
                    self.closed = True
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty and not self.closed

    def fileno(self) -> int:
        raise OSError("a relayed stream has no file descriptor")

    @property
    def encoding(self) -> str:
        return "utf-8"


@dataclass
class Request:
    conn: socket.socket
    pid: int
    argv: list[str]
    cwd: str
    env: dict[str, str]
    tty: tuple[bool, bool]
    size: list[int]
    argv0: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    running: threading.Event = field(default_factory=threading.Event)

    def send(self, **frame: Any) -> None:
        with self.lock, contextlib.suppress(OSError):
            self.conn.sendall((json.dumps(frame) + "\n").encode())


def read_request(conn: socket.socket) -> dict[str, Any]:
    """The command's first line: a JSON object with argv, cwd, env and tty."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ValueError("the command closed the connection before its request")
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise ValueError("request too large")
    raw = json.loads(data)
    if isinstance(raw, dict) and raw.get("status") is True:
        return raw
    if not (
        isinstance(raw, dict)
        and isinstance(raw.get("argv"), list)
        and all(isinstance(a, str) for a in raw["argv"])
        and isinstance(raw.get("cwd"), str)
        and isinstance(raw.get("env"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in raw["env"].items())
    ):
        raise ValueError("malformed request")
    return raw


class Service:
    """Accepts commands on the socket (a thread) and runs them one at a time in the thread that calls `serve_next`
    (the holder's main thread, so that Ctrl-C reaches the run as KeyboardInterrupt)."""

    def __init__(self, home: Path, env: dict[str, str]):
        self.path = home / SOCKET
        self.env = dict(env)  # the holder's environment at its start: what every worker of the cluster inherits
        self.pool = StandbyPool()
        self.memo: dict[str, Config] = {}  # the last composed config, for a repeated command
        self.last_used = time.monotonic()
        from skillopt_ray.cli.provenance import code_hash

        code_hash()  # pinned now: the hash of the code this process has loaded (an edit later is noticed)
        self._queue: queue.Queue[Request] = queue.Queue()
        self._busy = threading.Event()
        self._current: Optional[Request] = None  # the command being served
        self._closed = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old = os.umask(0o077)
        try:
            self._sock.bind(str(self.path))
        finally:
            os.umask(old)
        self._sock.listen(16)
        threading.Thread(target=self._accept_loop, name="service-accept", daemon=True).start()

    # ---------- the accepting thread: checks who asks, hands the run to the main thread or says "on your own"

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._admit, args=(conn,), name="service-admit", daemon=True).start()

    def _admit(self, conn: socket.socket) -> None:
        try:
            pid, uid, _gid = peer_credentials(conn)
            if uid != os.getuid():
                conn.close()  # another user: no answer at all
                return
            conn.settimeout(10.0)
            raw = read_request(conn)
            conn.settimeout(None)
            if raw.get("status"):  # `python -m skillopt_ray.cluster status`: the idle actors, nothing run
                current = self._current
                serving = Serving(pid=current.pid, argv=current.argv) if current is not None else None
                answer = StatusAnswer(standby=self.pool.readiness(), busy=self._busy.is_set(), serving=serving)
                conn.sendall((json.dumps(answer) + "\n").encode())
                conn.close()
                return
        except (OSError, ValueError) as e:
            with contextlib.suppress(OSError):
                conn.sendall((json.dumps({"refused": f"bad request: {e}"}) + "\n").encode())
                conn.close()
            return
        tty: list[Any] = raw["tty"] if isinstance(raw.get("tty"), list) else []
        size: list[Any] = raw["size"] if isinstance(raw.get("size"), list) else []
        req = Request(
            conn,
            pid,
            raw["argv"],
            raw["cwd"],
            raw["env"],
            (bool(tty[0:1] and tty[0]), bool(tty[1:2] and tty[1])),
            [int(n) for n in size[:2] if isinstance(n, int) and 0 < n < 10000],
            str(raw.get("argv0") or ""),
        )
        differs = env_difference(req.env, self.env)
        changed = self._code_changed()
        if changed:
            req.send(own=changed)
            conn.close()
        elif differs:
            shown = ", ".join(differs[:5]) + (" ..." if len(differs) > 5 else "")
            req.send(
                own=f"its environment differs from the kept cluster's ({shown}); to serve it, restart the cluster "
                "from this environment: python -m skillopt_ray.cluster down && python -m skillopt_ray.cluster up"
            )
            conn.close()
        elif self._busy.is_set() or not self._queue.empty():
            req.send(own="the kept cluster is serving another run")
            conn.close()
        else:
            self._busy.set()
            req.send(accepted=True)  # from here on the command waits for this run, never runs it itself
            self._queue.put(req)

    def _code_changed(self) -> str:
        """Why the holder's loaded code is not the code on disk any more (an edit since `up`), or ""."""
        from skillopt_ray.cli.provenance import code_hash

        loaded = code_hash()  # cached: the hash of what this process imported, computed at its first use
        try:
            on_disk = code_hash.__wrapped__()
        except Exception:  # noqa: BLE001 - an unreadable file: the command's own run says which
            on_disk = ""
        if on_disk == loaded:
            return ""
        return (
            "the package's code changed since the kept cluster started; restart it to serve the new code: "
            "python -m skillopt_ray.cluster down && python -m skillopt_ray.cluster up"
        )

    # ---------- the main thread: one run at a time

    def serve_next(self, timeout_s: float) -> bool:
        """Run the next command that asked, waiting up to `timeout_s`; returns whether one ran."""
        try:
            req = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return False
        self._current = req
        try:
            code = self._run(req)
            req.send(exit=code)
        finally:
            self._current = None
            with contextlib.suppress(OSError):
                req.conn.close()
            self.pool.end_run()
            self.last_used = time.monotonic()
            self._busy.clear()
        return True

    def _run(self, req: Request) -> int:
        from skillopt_ray.base.lifeline import identity

        main = entry_main()

        threading.Thread(target=self._watch, args=(req,), name="service-watch", daemon=True).start()
        out = Relay(req.conn, "out", req.tty[0], req.lock)
        err = Relay(req.conn, "err", req.tty[1], req.lock)
        req.running.set()
        trace = {TRACE_ENV: req.env[TRACE_ENV]} if req.env.get(TRACE_ENV) else {}
        self.pool.env = trace  # handed to the actors it adopts
        size = {"COLUMNS": str(req.size[0]), "LINES": str(req.size[1])} if len(req.size) == 2 else {}
        loaded = set(sys.modules)
        try:
            with _interruptible(), in_folder(req.cwd), _streams(out, err), _set_env({**trace, **size}):
                with serve(self.pool, identity(req.pid), self.memo), _argv0(req.argv0):
                    return main(req.argv)
        except KeyboardInterrupt:
            print("interrupted: rerun the same command to resume", file=err)
            return 130
        except BaseException as e:  # noqa: BLE001 - the holder serves the next command whatever this one did
            print(f"error: the kept cluster could not run the command: {type(e).__name__}: {e}", file=err)
            return 1
        finally:
            req.running.clear()
            out.closed = err.closed = True
            forget_user_modules(loaded)

    def _watch(self, req: Request) -> None:
        """The command's later frames: a signal it received, or its end (killed): either stops the run."""
        buf = b""
        while True:
            try:
                chunk = req.conn.recv(4096)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            if b"signal" in buf:
                break
        if req.running.is_set():
            import _thread

            _thread.interrupt_main()  # KeyboardInterrupt in the run (see _interruptible)

    def stop_run(self, why: str) -> None:
        """End the run being served (the holder is asked to stop): the command is told why, then the run stops as
        on Ctrl-C, saving its state, and says how to resume. Called in the main thread (a signal handler)."""
        req = self._current
        if req is not None and req.running.is_set():
            req.send(err=f"{why}\n")
            import _thread

            _thread.interrupt_main()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.pool.close()


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """While a run is served, SIGINT raises KeyboardInterrupt in the main thread (the holder's own handler only
    stops the holder)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def forget_user_modules(loaded: set[str]) -> list[str]:
    """Drop the modules a run imported from outside the installed packages (a benchmark plugin of the user's, a
    module named by `env.benchmark=module:Class`), so that the next run imports them again, edits included.
    Returns their names."""
    import sysconfig

    from skillopt_ray.cli.provenance import code_roots

    paths = sysconfig.get_paths()
    kept = [Path(paths[k]).resolve() for k in ("purelib", "platlib", "stdlib")] + code_roots()
    dropped = []
    for name in sorted(set(sys.modules) - loaded):
        where = getattr(sys.modules[name], "__file__", None)
        if not where:
            continue
        path = Path(where).resolve()
        if any(path.is_relative_to(root) for root in kept):  # libraries, and this package (its code hash guards it)
            continue
        del sys.modules[name]
        dropped.append(name)
    return dropped


@contextlib.contextmanager
def _argv0(argv0: str) -> Iterator[None]:
    """The command's own argv[0] while it runs (its provenance names how it was started)."""
    saved = list(sys.argv)
    sys.argv = [argv0 or "skillopt_ray", *saved[1:]]
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _set_env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _streams(out: TextIO | Relay, err: TextIO | Relay) -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
