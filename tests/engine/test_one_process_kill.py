"""A SIGKILL of a one-process run (`ray.mode=local`), then the same command again: no model call is paid twice.

Modelled on tests/cli/test_kill_cli.py (the Ray path): the run once uninterrupted (the reference), then the same
command in another output_dir, killed (kill -9 of its one process) twice once the endpoint has answered a chosen
number of the reference's calls; the first rerun is one process again, the last one resumes on Ray (a run started
in one process resumes on Ray). The endpoint stops answering at the chosen point, so the ledger can be compared
with what it answered exactly (see test_kill_cli.py for why), and after each kill no request reaches it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import qa_fixture
from kill_helpers import HoldingServer, _cache, _cli, _decisions, _ledger
from scripted_server import Policies

pytestmark = pytest.mark.slow  # four commands, one of them starting Ray: over a minute here


def _finish(url: str, tmp_path: Path, out: Path, mode: str, resumed: bool) -> Path:
    p = _cli(url, tmp_path, out, mode)
    stdout, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    assert ("resuming run" in err) == resumed, err[-2000:]
    assert ("engine: one process" in err) == (mode == "local"), err[:500]
    return Path(stdout.split("run directory: ")[-1].splitlines()[0])


def _kill_after(srv: HoldingServer, tmp_path: Path, out: Path, answers: int) -> int:
    """Run the one-process command until the endpoint answered `answers` calls, let it go on a moment, kill -9 it;
    refuse what it left waiting once it is dead. Returns how many requests it left waiting."""
    srv.hold_at = answers
    p = _cli(srv.base_url, tmp_path, out, "local")
    deadline = time.monotonic() + 180
    while srv.mode != "hold" and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.mode == "hold", "the command ended before the kill: " + (p.communicate()[1][-2000:] if p.poll() else "")
    time.sleep(0.5)
    assert p.poll() is None, "the command ended before the kill: " + p.communicate()[1][-2000:]
    p.kill()  # SIGKILL: the whole run (driver, gateway, env workers) is this one process
    killed_at = time.monotonic()
    p.wait()
    assert srv.answered == answers
    waiting = srv.undecided
    time.sleep(1.5)
    late = [t - killed_at for t in list(srv.arrivals) if t > killed_at + 0.2]
    assert not late, f"{len(late)} requests arrived after the one process was killed"
    srv.refuse_waiting()
    return waiting


def test_a_sigkilled_one_process_run_resumes_here_and_on_ray_paying_no_call_twice(tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    with HoldingServer(Policies(target="rule_gated", answers=answers)) as srv:
        ref_dir = _finish(srv.base_url, tmp_path, tmp_path / "ref", "local", resumed=False)
        ref_served = srv.served()
        total = srv.answered
        assert _ledger(ref_dir) == ref_served
        srv.reset()
        out = tmp_path / "out"
        held = _kill_after(srv, tmp_path, out, total // 3)
        held += _kill_after(srv, tmp_path, out, (2 * total) // 3)
        run_dir = _finish(srv.base_url, tmp_path, out, "cluster", resumed=True)
        served = srv.served()

    assert _decisions(run_dir) == _decisions(ref_dir)
    summary, ref_summary = (json.loads((d / "summary.json").read_text()) for d in (run_dir, ref_dir))
    assert (summary["selection"], summary["test"], summary["versions"]) == (
        ref_summary["selection"],
        ref_summary["test"],
        ref_summary["versions"],
    )
    # the endpoint answered each of the reference's calls once over the three commands, and the ledger says so
    assert served == ref_served
    assert _ledger(run_dir) == served
    assert summary["tokens"]["lost"] >= held and ref_summary["tokens"]["lost"] == 0, (summary["tokens"], held)
    assert _cache(run_dir) == _cache(ref_dir)
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]
