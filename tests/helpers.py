"""Helpers shared by test files (fixtures live in conftest.py): import them from here, never from another test file."""

from __future__ import annotations

from typing import Any


def checked(data: Any) -> Any:
    """A test's plain run config (as composed, perhaps edited by the test) through the run's one check pass
    (cli.preflight): what execute() and run_one() take."""
    from skillopt_ray import cli
    from skillopt_ray.config import from_container

    return cli.preflight(from_container(data))


def llm_config(llm: dict[str, Any]) -> Any:
    """The typed `llm` section the gateway actor takes, from a test's plain one (the defaults fill in)."""
    from skillopt_ray.config import from_container

    return from_container({"experiment": "_", "llm": llm}).llm


def echo_llm(url: str, **extra: Any) -> dict[str, Any]:
    """A plain `llm` section whose roles call the scripted server at `url` (no structured output)."""
    role = {
        "provider": "openai",
        "model": "scripted",
        "base_url": url,
        "structured_output": "none",
        "max_concurrency": 8,
    }
    return {"backend": "compatible", "target": role, "optimizer": role, **extra}


def echo_server(latency_s: float = 0.0) -> Any:
    """A scripted server that answers each call with `ok <its sample key>` (so a reply names its task)."""
    from scripted_server import ScriptedServer

    return ScriptedServer(policy=lambda body, headers: f"ok {headers.get('x-skillopt-key', '')}", latency_s=latency_s)
