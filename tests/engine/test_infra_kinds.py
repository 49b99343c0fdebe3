"""Issue 14: failures of the machinery around an episode are named, counted errors of their own kind, never a model
failure. A sandbox that cannot start and a formula engine that fails on valid formulas leave the episode unscored;
a formula the script wrote that does not even parse stays the script's fault."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import openpyxl
import pytest
from conftest import need_bwrap
from helpers import llm_config
from skillopt_envs.base import INFRA_KINDS, EpisodeResult
from skillopt_envs.sandbox import Sandbox, SandboxStartError
from skillopt_envs.spreadsheetbench import readcells
from skillopt_envs.spreadsheetbench.benchmark import FormulaEngineError, SpreadsheetBenchmark
from skillopt_envs.spreadsheetbench.samples import SOLUTIONS, template_of

from skillopt_ray.stages.rollout import summarize

FAKE_BWRAP = """#!/bin/sh
echo run >> "{log}"
echo "bwrap: setting up uid map: Permission denied" >&2
exit 1
"""


def _fake_bwrap(tmp_path: Path, monkeypatch) -> Path:
    """bubblewrap that refuses to start, as it does when user namespaces are switched off after start-up."""
    log = tmp_path / "bwrap.log"
    exe = tmp_path / "bwrap"
    exe.write_text(FAKE_BWRAP.format(log=log))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr("skillopt_envs.sandbox.bwrap_path", lambda: str(exe))
    return log


def test_a_sandbox_that_cannot_start_is_tried_twice_and_then_says_so(tmp_path, monkeypatch):
    need_bwrap()
    sandbox = Sandbox("bwrap")  # probed with the real bubblewrap
    log = _fake_bwrap(tmp_path, monkeypatch)
    r = sandbox.run("print('hi')\n", {}, tmp_path / "out")
    assert not r.started and not r.ok
    assert r.describe() == "the sandbox could not start (bwrap: setting up uid map: Permission denied)"
    assert log.read_text().count("run") == 2


def test_a_script_that_only_looks_like_a_sandbox_failure_is_the_scripts_error(tmp_path):
    need_bwrap()
    r = Sandbox("bwrap").run(
        "import sys\nsys.stderr.write('bwrap: not really\\n')\nsys.exit(1)\n", {}, tmp_path / "out"
    )
    assert r.started and not r.ok and r.returncode == 1
    assert r.describe() == "the script exited with status 1"


def test_a_spreadsheet_episode_whose_sandbox_cannot_start_raises_a_named_infra_error(tmp_path, monkeypatch):
    """Raised (not returned as a wrong answer), so the pool retries it and then records kind `sandbox_start`."""
    need_bwrap()
    bench = SpreadsheetBenchmark({"options": {"sample_dir": str(tmp_path / "samples")}})
    task = bench.load_split("val")[0]
    _fake_bwrap(tmp_path, monkeypatch)

    class Llm:
        async def chat(self, req):
            from skillopt_envs.chat import ChatResult

            return ChatResult(f"```python\n{SOLUTIONS[template_of(task.task_id)]}```", 10, 10, False, "stop")

    from skillopt_envs.base import EpisodeContext

    with pytest.raises(SandboxStartError, match=r"^the sandbox could not start \(bwrap: setting up uid map") as err:
        asyncio.run(bench.run_episode(task, "# skill", Llm(), EpisodeContext("t", False, 2, 0)))
    assert err.value.kind == "sandbox_start" and "sandbox_start" in INFRA_KINDS


def _workbook(path: Path, formula: str) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["A2"], ws["B1"] = 1, 2, formula
    wb.save(path)


def test_an_engine_failure_on_valid_formulas_is_reported_not_read_as_empty(tmp_path, monkeypatch):
    _workbook(tmp_path / "ok.xlsx", "=SUM(A1:A2)")
    assert readcells.read(str(tmp_path / "ok.xlsx"), {"Sheet": ["B1"]}, True)["sheets"]["Sheet"]["B1"] == 3

    def broken(path, cells):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(readcells, "recalculate", broken)
    out = readcells.read(str(tmp_path / "ok.xlsx"), {"Sheet": ["B1"]}, True)
    assert out["recalc_error"] == "RuntimeError: engine exploded" and out["invalid_formulas"] == []


def test_a_formula_that_does_not_parse_is_the_scripts_fault_and_nothing_is_recalculated(tmp_path, monkeypatch):
    _workbook(tmp_path / "bad.xlsx", "=SUM(A1:A2")
    called = []
    monkeypatch.setattr(readcells, "recalculate", lambda *a: called.append(a) or {})
    out = readcells.read(str(tmp_path / "bad.xlsx"), {"Sheet": ["B1"]}, True)
    assert called == [] and out["recalc_error"] == ""
    assert out["invalid_formulas"] == ["Sheet!B1 '=SUM(A1:A2': ParenthesesError"]
    assert (
        out["sheets"]["Sheet"]["B1"] is None
    )  # read as the official rule reads it: the cell is wrong, the script's fault


def test_the_benchmark_turns_a_recalculation_failure_into_an_unscored_episode(tmp_path, monkeypatch):
    need_bwrap()
    bench = SpreadsheetBenchmark({"options": {"sample_dir": str(tmp_path / "samples"), "recalculate": True}})
    real_run = bench.sandbox.run

    def reader_reports_engine_failure(script, inputs, out_dir, env=None, keep=()):
        r = real_run(script, inputs, out_dir, env=env, keep=keep)
        if "values.json" in r.files:  # the reader ran: make its answer the one an engine failure gives
            data = json.loads(r.files["values.json"].read_text())
            for d in data.values():
                d.update(recalc_error="KeyError: 'SHEET1'", recalculated=2)
            r.files["values.json"].write_text(json.dumps(data))
        return r

    monkeypatch.setattr(bench.sandbox, "run", reader_reports_engine_failure)
    task = bench.load_split("val")[0]

    class Llm:
        async def chat(self, req):
            from skillopt_envs.chat import ChatResult

            return ChatResult(f"```python\n{SOLUTIONS[template_of(task.task_id)]}```", 10, 10, False, "stop")

    from skillopt_envs.base import EpisodeContext

    r = asyncio.run(bench.run_episode(task, "# skill", Llm(), EpisodeContext("t", False, 2, 0)))
    assert r.infra_error and r.error_kind == "formula_engine" and not r.scored
    assert r.error.startswith(
        "formula engine: could not recalculate 2 formula cell(s) of an output workbook (KeyError: 'SHEET1')"
    )
    assert isinstance(FormulaEngineError("x"), RuntimeError)


def test_summaries_count_infra_errors_by_kind_beside_the_means():
    rs = [
        EpisodeResult("a", "t", hard=1.0, soft=1.0),
        EpisodeResult("b", "t", hard=0.0),
        EpisodeResult("c", "t", infra_error=True, fail_reason="infra_error", error_kind="sandbox_start"),
        EpisodeResult("d", "t", infra_error=True, fail_reason="infra_error", error_kind="formula_engine"),
        EpisodeResult("e", "t", infra_error=True, fail_reason="infra_error", error_kind="sandbox_start"),
    ]
    s = summarize(rs)
    assert (s.n, s.n_scored, s.hard, s.infra_errors) == (5, 2, 0.5, 3)
    assert s.infra_kinds == {"formula_engine": 1, "sandbox_start": 2}
    assert set(s.infra_kinds) <= set(INFRA_KINDS)


@pytest.mark.parametrize(
    "raise_error,kind,text",
    [
        ("sandbox_start", "sandbox_start", "SandboxStartError: the sandbox could not start"),
        ("boom", "env", "RuntimeError: synthetic failure: boom"),
    ],
)
def test_the_pool_keeps_the_kind_of_an_env_failure_through_real_actors(ray_cluster, raise_error, kind, text):
    import ray
    from skillopt_envs.base import EpisodeContext
    from skillopt_envs.synthetic.benchmark import SyntheticBenchmark

    from skillopt_ray.engine.envpool import EnvPool, PoolSettings
    from skillopt_ray.llm.gateway import GatewayActor

    role = {"provider": "openai", "model": "scripted", "base_url": "http://127.0.0.1:9", "structured_output": "none"}
    gw = GatewayActor.remote(llm_config({"backend": "compatible", "target": role, "optimizer": role}), None, None)
    env = {"options": {"tasks": 2, "raise_error": raise_error}}
    tasks = SyntheticBenchmark(env).load_split("train")
    pool = EnvPool("synthetic", env, gw, PoolSettings(1, 2, 0.0, 60.0, 1))
    try:
        results = asyncio.run(pool.run(tasks, "# s", EpisodeContext("k", False, 1, 0)))
    finally:
        pool.shutdown()
        ray.kill(gw)
    assert [r.task_id for r in results] == [t.task_id for t in tasks]
    assert all(r.infra_error and r.error_kind == kind and r.error.startswith(text) for r in results), [
        (r.error_kind, r.error) for r in results
    ]
    assert pool.retried_episodes == 2 and pool.replaced == 0
    assert summarize(results).infra_kinds == {kind: 2}


def test_the_eval_summary_line_names_the_kinds():
    from skillopt_ray.cli.report import summary_table

    e = {
        "hard": 0.5,
        "soft": 0.5,
        "n": 4,
        "infra_errors": 2,
        "infra_kinds": {"sandbox_start": 1, "timeout": 1},
        "data_errors": 0,
        "per_type": {},
    }
    assert "infra errors 2: sandbox_start 1, timeout 1, data errors 0" in summary_table(
        {"mode": "eval", "split": "test", "eval": e}
    )
