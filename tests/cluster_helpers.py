"""Shared by the kept-cluster tests: the cluster command and a command's environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _env(home: Path, **extra: str) -> dict[str, str]:
    """A command's environment with the kept cluster's record in `home` (tests/test_service.py uses it too): none of
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
