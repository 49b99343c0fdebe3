"""The start-up marks that scripts/bench_startup.py reads: off by default, one line per mark from any process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from skillopt_ray.base import startup_trace


def test_marks_are_written_only_when_asked_and_read_back_in_seconds(tmp_path, monkeypatch):
    path = tmp_path / "trace.txt"
    monkeypatch.delenv(startup_trace.ENV, raising=False)
    startup_trace.mark("nothing")
    assert not path.exists()
    monkeypatch.setenv(startup_trace.ENV, str(path))
    startup_trace.mark("ray-up")
    code = "from skillopt_ray.base.startup_trace import mark; mark('env-actor-started'); mark('ray-up')"
    subprocess.run([sys.executable, "-c", code], check=True)  # another process inherits the variable
    lines = path.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["ray-up", "env-actor-started", "ray-up"]
    assert len({line.split()[2] for line in lines}) == 2  # two pids
    t0 = float(lines[0].split()[1])
    got = startup_trace.read(str(path), t0 - 1.0)
    assert got["ray-up"] == pytest.approx(1.0)  # the first occurrence counts
    assert 1.0 <= got["env-actor-started"] < 30
    assert startup_trace.read(str(tmp_path / "missing.txt"), 0.0) == {}


def test_the_benchmark_hands_its_runs_the_environment_it_started_with(tmp_path, monkeypatch):
    """scripts/bench_startup.py: what its own imports set (making the ALFWorld samples sets ALFWORLD_DATA) does not
    reach the runs it measures, and an older checkout runs with its own benchmarks as skillopt_envs."""
    import importlib.util
    from pathlib import Path

    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("BENCH_STARTUP_PROBE", "kept")
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_startup.py"
    spec = importlib.util.spec_from_file_location("bench_startup_probe", script)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the repository and tests/ first
    spec.loader.exec_module(bench)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "empty"))  # as `import alfworld` does, after the start
    env = bench.child_env(bench.REPO)
    assert "ALFWORLD_DATA" not in env and env["BENCH_STARTUP_PROBE"] == "kept"
    assert env["PYTHONPATH"] == str(bench.REPO)
    older = tmp_path / "older"
    (older / "envs").mkdir(parents=True)
    first, links = bench.child_env(older)["PYTHONPATH"].split(":")
    assert first == str(older) and (Path(links) / "skillopt_envs").resolve() == (older / "envs").resolve()
