"""`python -m skillopt_ray.dashboard [--port 8765] [--host 127.0.0.1] [--outputs outputs] [--ray-address URL]`"""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from pathlib import Path
from typing import Optional

from skillopt_ray.exit_codes import EXIT_CONFIG, EXIT_OK


def _port_free(host: str, port: int) -> Optional[str]:
    """None if the port can be bound, else why not (one line)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is already in use; pick another with --port (e.g. --port {port + 1})"
            return f"cannot listen on {host}:{port}: {e.strerror}"
    return None


def main(argv: Optional[list[str]] = None) -> int:
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
    a = ap.parse_args(argv)
    problem = _port_free(a.host, a.port)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    import uvicorn

    from skillopt_ray.dashboard.server import Dashboard, build_app

    dash = Dashboard(Path(a.outputs), Path.cwd(), a.ray_address)
    print(f"dashboard: http://{a.host}:{a.port}/  (runs under {dash.outputs}; Ctrl-C stops it)", flush=True)
    uvicorn.run(build_app(dash), host=a.host, port=a.port, log_level="warning", access_log=False)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
