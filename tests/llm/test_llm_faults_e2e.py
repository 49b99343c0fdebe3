"""Transport faults in a whole run (SearchQA smoke through the driver and the gateway actor): faults that
clear within the retry window leave the run identical to a clean one; a fault that persists ends the run
with exit 1 and one line naming the endpoint and the fault, never a Ray trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qa_fixture
from helpers import checked
from scripted_server import Fault, Policies, ScriptedServer

from skillopt_ray import cli

pytestmark = pytest.mark.slow  # Ray clusters and whole runs: minutes (pytest -m "not slow" leaves them out)

FAST_RETRIES = ["llm.retry_base_s=0.05", "llm.retry_max_s=0.2", "llm.retry_window_s=5"]


def _run(url: str, out: Path, data: Path, *extra: str) -> tuple[int, Path]:
    overrides = [
        "+experiment=searchqa",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        "debug.progress=off",
        f"env.data_dir={data}",
        "env.options.split_source=folders",
        *FAST_RETRIES,
        *extra,
    ]
    cfg = cli.plain(cli.compose(overrides))
    cfg = cli.resolve_paths(cfg)
    return cli.run_one(checked(cfg)), cli.run_dir_for(cfg)


def _outcome(rd: Path) -> tuple:
    summary = json.loads((rd / "summary.json").read_text())
    return (summary["test"], (rd / "best_skill.md").read_text(), json.loads((rd / "history.json").read_text()))


def test_faults_that_clear_leave_the_run_identical_to_a_clean_one(ray_cluster, tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        code, clean = _run(srv.base_url, tmp_path / "clean", tmp_path / "qa")
        assert code == 0
        srv.inject(
            Fault(200, truncated=True),
            Fault(200, html=True),
            Fault(200, reset=True),
            Fault(500),
            Fault(429, retry_after=0.2),
            Fault(200, malformed=True, hang_s=3.0),
            Fault(503),
        )
        # the seven faults may all land on one call: its own retries must outlast them (an episode whose call ran
        # out of retries is not replayed)
        code, faulted = _run(
            srv.base_url,
            tmp_path / "faulted",
            tmp_path / "qa",
            "llm.target.timeout_s=1",
            "llm.optimizer.timeout_s=1",
            "llm.max_retries=10",
        )
        assert code == 0 and not srv.state.faults  # every injected fault was hit
    assert _outcome(faulted) == _outcome(clean)
    ledger = json.loads((faulted / "ledger.json").read_text())
    assert ledger["totals"]["calls"] == json.loads((clean / "ledger.json").read_text())["totals"]["calls"]


def test_a_persistent_fault_ends_the_run_with_one_line(ray_cluster, tmp_path, capsys):
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        srv.inject(*[Fault(200, truncated=True)] * 400)
        code, _rd = _run(srv.base_url, tmp_path / "out", tmp_path / "qa", "llm.retry_window_s=0.5")
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 1 and len(lines) == 1, err
    assert "JSON body cut off" in lines[0] and srv.base_url in lines[0]
    assert "ray::" not in err and "pid=" not in err and "\x1b[" not in err and "Traceback" not in err
