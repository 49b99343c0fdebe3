"""Start a private local Ray cluster, or join one (`ray.address` / RAY_ADDRESS, or the cluster kept up by
`python -m skillopt_ray.cluster up`: a run with no address attaches to it and skips Ray's start)."""

from __future__ import annotations

import os
import sys
from typing import Any

from skillopt_ray.cli.errors import UsageError, one_line
from skillopt_ray.config.plain import PlainConfig

# what every run's ray.init passes: no dashboard, actors' logs stay in their files, Ray's own log lines off
COMMON_INIT: dict[str, Any] = dict(
    include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, logging_level="ERROR"
)


def local_init_options(data: PlainConfig) -> dict[str, Any]:
    """ray.init options for a private local cluster (also what scripts/bench_startup.py measures as the floor).

    address="local": a new cluster of our own, even where `ray start` left one running (ray.init() would join it)."""
    return dict(
        COMMON_INIT,
        address="local",
        num_cpus=data["ray"]["num_cpus"] or os.cpu_count(),
        object_store_memory=data["ray"]["object_store_memory_mb"] * 1024 * 1024,
    )


def start_ray(data: PlainConfig) -> None:
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = data["ray"]["address"] or os.environ.get("RAY_ADDRESS")
    if address and address not in ("auto", "local"):
        from skillopt_ray.engine.warm import serving

        if serving() is not None:
            raise UsageError(
                f"ray.address={address} names a cluster, but the kept cluster's holder took this command: run it "
                "with SKILLOPT_SERVICE=off, or drop ray.address"
            )
        probe_address(address)  # a configured address that does not answer is an error even if Ray is already up here
    if ray.is_initialized():
        return
    if not address and attach_kept_cluster():
        return
    if address == "local":  # RAY_ADDRESS=local: a new cluster, as with no address (and never the kept one)
        address = None
    try:
        if address:
            ray.init(address=address, **COMMON_INIT)
        else:
            from skillopt_ray.base.private_apis import ray_init_lean

            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            lean = data["ray"].get("head", "lean") == "lean"
            (ray_init_lean if lean else ray.init)(**local_init_options(data))
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
        raise UsageError(
            f"cannot reach Ray at {address or 'a new local cluster'}: {one_line(e)}; check ray.address / RAY_ADDRESS, "
            "or drop it to start locally"
        ) from None


def probe_address(address: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds (not Ray's minutes of retries) when host:port does not answer."""
    import socket

    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as e:
        raise UsageError(
            f"cannot reach Ray at {address}: {getattr(e, 'strerror', None) or e}; check ray.address / RAY_ADDRESS, "
            "or drop it to start a local cluster"
        ) from None


def attach_kept_cluster() -> bool:
    """Join the cluster `python -m skillopt_ray.cluster up` keeps, when its holder runs; lease it for this process's
    life (its idle clock waits). False when there is none."""
    import ray

    from skillopt_ray.runs import kept_cluster

    kept = kept_cluster.live()
    if kept is None:
        return False
    if not kept.answers():  # a holder that is ending: its Ray cluster is gone or going
        print(
            f"note: the Ray cluster kept up by pid {kept.pid} does not answer at {kept.address}: this run starts its own",
            file=sys.stderr,
        )
        return False
    from skillopt_ray.base.private_apis import ray_set_auth_mode

    ray_set_auth_mode(kept.auth_mode)  # the kept cluster asks for its token (see cluster.py)
    kept_cluster.take_lease()
    from skillopt_ray.base.environ import handed_environment
    from skillopt_ray.base.startup_trace import ENV

    # workers are the kept cluster's children, not this process's: what this command's environment adds or changes
    # (a key exported since `up`, a start-up trace) is handed to this job's workers explicitly
    handed = handed_environment(kept.pid)
    if os.environ.get(ENV):
        handed[ENV] = os.environ[ENV]
    extra: dict[str, Any] = {"runtime_env": {"env_vars": handed}} if handed else {}
    try:
        ray.init(address=kept.address, **COMMON_INIT, **extra)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
        raise UsageError(
            f"cannot reach the Ray cluster kept up by pid {kept.pid} at {kept.address}: {one_line(e)}; stop it with "
            "`python -m skillopt_ray.cluster down` (runs then start their own)"
        ) from None
    print(
        f"attached to the Ray cluster kept up by pid {kept.pid} (`python -m skillopt_ray.cluster down` stops it)",
        file=sys.stderr,
    )
    return True
