"""ray.head: a private cluster starts lean (without Ray's autoscaler monitor, log monitor and dashboard API server)
unless the config asks for Ray's full head; anything else is named before Ray starts."""

from __future__ import annotations

from typing import Any

import pytest

from skillopt_ray import cli
from skillopt_ray.base import private_apis
from skillopt_ray.cli import ray_session


def test_ray_head_defaults_to_lean_and_a_bad_value_is_one_line():
    obj = cli.compose(["+experiment=alfworld"])
    data = cli.plain(obj)
    assert obj.ray.head == data["ray"]["head"] == "lean"
    with pytest.raises(cli.UsageError, match=r"ray\.head='fat': use lean .* or full"):
        cli.compose(["+experiment=alfworld", "ray.head=fat"])


@pytest.mark.parametrize("head,expected", [("lean", "lean"), ("full", "ray.init")])
def test_a_private_cluster_starts_with_the_head_the_config_names(monkeypatch, head, expected):
    import ray

    started: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_session, "attach_kept_cluster", lambda: False)
    monkeypatch.setattr(private_apis, "ray_init_lean", lambda **kw: started.append(("lean", kw)))
    monkeypatch.setattr(ray, "init", lambda **kw: started.append(("ray.init", kw)))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    data = cli.plain(cli.compose(["+experiment=alfworld", f"ray.head={head}", "ray.num_cpus=2"]))
    ray_session.start_ray(data)
    assert [(how, kw["address"], kw["num_cpus"]) for how, kw in started] == [(expected, "local", 2)]
