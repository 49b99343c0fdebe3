"""`python -m skillopt_ray.dashboard [--port 8765] [--host 127.0.0.1] [--outputs outputs] [--ray-address URL]
[--token T] [--allowed-hosts a,b] [--allow-path DIR ...] [--allow-endpoint HOST ...] [--project DIR]`"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from pathlib import Path
from typing import Optional

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_OK
from skillopt_ray.dashboard.keys import allowed_endpoint
from skillopt_ray.dashboard.security import WILDCARD, Guard, is_loopback


def _listen(host: str, port: int) -> socket.socket | str:
    """The listening socket, bound before the dashboard says its address (so the first request never finds the port
    closed), else why it cannot be had (one line).

    It binds as uvicorn would: IPv6 for an address with a colon (`::`, `::1`), and with SO_REUSEADDR, so the
    connections a just-stopped dashboard left in TIME_WAIT do not hold its port for a minute; a server still
    listening there is refused all the same."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host.strip("[]"), port))
        s.listen(128)
    except OSError as e:
        s.close()
        if e.errno == errno.EADDRINUSE:
            return f"port {port} on {host} is already in use; pick another with --port (e.g. --port {port + 1})"
        return f"cannot listen on {host}:{port}: {e.strerror}"
    s.set_inheritable(True)
    return s


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m skillopt_ray.dashboard",
        description="A web page to launch, watch and compare skill-training runs (read from their run directories).",
    )
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--outputs", default="outputs", help="the output folder whose runs are shown (default: outputs)")
    ap.add_argument(
        "--ray-address",
        default=None,
        help="a Ray cluster's dashboard address (http://head:8265): runs are submitted as Ray jobs there",
    )
    ap.add_argument(
        "--token",
        default=None,
        help=f"the access token, at least {MIN_TOKEN_CHARS} characters (default: ${TOKEN_ENV}, else a new random one "
        "each start); other local users can read a command line, so prefer the variable",
    )
    ap.add_argument(
        "--allowed-hosts",
        default="",
        help="comma-separated host names the page may be reached by, besides 127.0.0.1, localhost, ::1 and --host",
    )
    ap.add_argument(
        "--allow-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder the launch form's paths may point into, besides this folder and --outputs (repeatable)",
    )
    ap.add_argument(
        "--allow-endpoint",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="an address a URL typed in the form may send a model key to, besides the endpoint the chosen preset "
        "sends it to (repeatable; the MLflow token goes only to MLFLOW_TRACKING_URI)",
    )
    ap.add_argument(
        "--project",
        default=None,
        help="the project whose staged nights the Nights tab lists (default: the one whose .skillopt/nights is "
        "--outputs, else this folder)",
    )
    return ap


TOKEN_ENV = "SKILLOPT_DASHBOARD_TOKEN"
MIN_TOKEN_CHARS = 16  # a short token is guessed; the random one is 43


def _token(a: argparse.Namespace) -> Optional[str]:
    """The token the user chose (--token, else $SKILLOPT_DASHBOARD_TOKEN), None for a random one."""
    return a.token if a.token is not None else os.environ.get(TOKEN_ENV) or None


def _problem(a: argparse.Namespace) -> Optional[str]:
    """Bad arguments as one line naming the fix, else None."""
    token = _token(a)
    where = "--token" if a.token is not None else f"${TOKEN_ENV}"
    if token is not None and len(token.strip()) < MIN_TOKEN_CHARS:
        return (
            f"{where} is {len(token.strip())} characters; give at least {MIN_TOKEN_CHARS} (a short token is guessed) "
            "or leave it out for a random one"
        )
    if not 1 <= a.port <= 65535:
        return f"--port {a.port} is not a TCP port; give one from 1 to 65535"
    for d in a.allow_path:
        if not Path(d).expanduser().is_dir():
            return f"--allow-path {d}: no such directory"
    if a.project is not None and not Path(a.project).expanduser().is_dir():
        return f"--project {a.project}: no such directory"
    for e in a.allow_endpoint:
        try:
            allowed_endpoint(e)
        except ValueError as err:
            return str(err)
    return None


def _url(host: str, port: int, token: str) -> str:
    if host in WILDCARD:
        host = "::1" if host == "::" else "127.0.0.1"  # `::` may listen on IPv6 only, where 127.0.0.1 finds nothing
    host = host.strip("[]")
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def main(argv: Optional[list[str]] = None) -> int:
    a = _parser().parse_args(argv)
    problem = _problem(a)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    import uvicorn

    from skillopt_ray.dashboard.server import Dashboard, build_app

    sock = _listen(a.host, a.port)
    if isinstance(sock, str):
        print(f"error: {sock}", file=sys.stderr)
        return EXIT_CONFIG
    guard = Guard.make(_token(a), a.host, a.allowed_hosts.split(","))
    if a.token is not None:
        print(
            f"warning: --token is readable by other local users (ps, /proc/<pid>/cmdline); set {TOKEN_ENV} instead",
            file=sys.stderr,
            flush=True,
        )
    allow = tuple(Path(d).expanduser() for d in a.allow_path)
    project = Path(a.project).expanduser() if a.project else None
    dash = Dashboard(Path(a.outputs), Path.cwd(), a.ray_address, guard, allow, tuple(a.allow_endpoint), project)
    if not is_loopback(a.host):
        print(
            f"warning: --host {a.host} makes the dashboard reachable from other machines; the token is then the "
            "only guard (anyone with the URL can launch runs with your keys): share it with no one",
            file=sys.stderr,
            flush=True,
        )
    print(f"dashboard: {_url(a.host, a.port, guard.token)}  (runs under {dash.outputs}; Ctrl-C stops it)", flush=True)
    config = uvicorn.Config(build_app(dash), log_level="warning", access_log=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shuts down, then raises the Ctrl-C again: the documented way to stop
        print("dashboard: stopped", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
