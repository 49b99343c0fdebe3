"""A harness target that cannot start is one line and exit 2 before Ray starts, not a failed episode after it:
the agent CLI missing from its npm prefix, or Codex's own sandbox asked to run inside the jail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _base(tmp_path: Path) -> list[str]:
    return [
        "+experiment=searchqa",
        "+smoke=tiny",
        "llm.base_url=http://127.0.0.1:9/v1",
        f"output_dir={tmp_path / 'out'}",
        "debug.progress=off",
    ]


def test_claude_code_without_its_cli_is_one_line_and_exit_2_before_ray(tmp_path):
    """Through the real command line, with an npm prefix that holds no CLI: nothing of the run is started."""
    empty = tmp_path / "prefix"
    (empty / "bin").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PATH=str(empty / "bin") + ":/usr/bin:/bin")
    args = [*_base(tmp_path), "llm=claude_code", f"llm.target.agent.prefix={empty}"]
    p = subprocess.run(
        [sys.executable, "-m", "skillopt_ray", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    err = p.stderr.strip()
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "\n" not in err, err
    assert "claude CLI" in err and f"{empty}/bin/claude" in err and "scripts/install_harnesses.sh" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # no run directory either
    assert "Ray" not in p.stdout + err


@pytest.fixture
def no_ray(monkeypatch):
    """Fails the test if anything tries to start or join a Ray cluster."""
    import ray

    def refuse(*_a, **_kw):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", refuse)


def test_codex_without_its_cli_is_one_line_and_exit_2(tmp_path, capsys, no_ray):
    from skillopt_ray import cli

    code = cli.main([*_base(tmp_path), "llm.target.harness=codex", f"llm.target.agent.prefix={tmp_path / 'none'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    assert "llm.target.harness=codex needs the codex CLI" in err and "scripts/install_harnesses.sh" in err


def test_codex_own_sandbox_inside_the_jail_is_refused_before_ray(tmp_path, capsys, no_ray):
    from skillopt_envs.sandbox import bwrap_path, userns_filter

    from skillopt_ray import cli

    if userns_filter() is None or bwrap_path() is None:
        pytest.skip("the jail does not refuse user namespaces here")
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "codex").write_text("#!/bin/sh\n")  # the check looks for the file, it does not run it
    args = [*_base(tmp_path), "llm=codex", f"llm.target.agent.prefix={prefix}"]
    code = cli.main([*args, "llm.target.agent.codex_sandbox=workspace-write"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    assert "codex_sandbox=workspace-write cannot run commands inside the bubblewrap jail" in err
