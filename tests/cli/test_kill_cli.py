"""Real SIGKILLs of the CLI at seeded random points, then the same command again until it finishes.

One subprocess test (each CLI start costs Ray and MLflow imports, 10-20 s here):
1. the run once without interruption (its own output_dir): the reference;
2. the same command in another output_dir, killed three times: while the run starts (MLflow store
   creation, plus a random delay), then twice once the endpoint has answered a random number of the
   reference's calls (anywhere in rollouts, analyst, merge, slow-update and meta-skill calls); after a
   kill no paid call may start and the run's actors must be gone within a second;
3. the rerun finishes, and the run directory ends as the reference's: every skill version, history,
   step, epoch and final record, the score cache and the response cache byte for byte or key for key;
   only what names the command (paths, times, run ids) may differ. The ledger counts exactly the calls
   and tokens the endpoint answered across all the processes, per role and stage, and no call was paid twice.

Why answers are held before a kill: a reply the endpoint has sent but the gateway has not yet read when
the kill lands is paid for yet cannot be counted (README: "the one call in flight at a kill may go
unrecorded"). To compare the ledger with the endpoint exactly, the server here stops answering at the
chosen point (requests still arrive, and wait), the run goes on for a random 0.2-0.8 s with what it has,
the CLI is killed, and the waiting requests are refused once the run's processes are gone: the endpoint
has answered exactly the calls the run could have read. SKILLOPT_KILL_SEED picks other kill points.
"""

from __future__ import annotations

import difflib
import json
import os
import random
import time
from pathlib import Path

import pytest
from conftest import qa_fixture
from kill_helpers import (
    HoldingServer,
    _after_kill,
    _cache,
    _cli,
    _comparable,
    _decisions,
    _kill_when,
    _ledger,
    _running,
)
from scripted_server import Policies

from skillopt_ray.runs.tracking import store_state

pytestmark = pytest.mark.slow


def _finish(url: str, tmp_path: Path, out: Path, resumed: bool) -> Path:
    p = _cli(url, tmp_path, out)
    stdout, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-2000:]
    assert ("resuming run" in err) == resumed, err[-2000:]
    assert "half-made" not in err  # no kill left a broken MLflow store behind
    run_dir = Path(stdout.split("run directory: ")[-1].splitlines()[0])
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]
    return run_dir


def test_sigkills_at_random_points_then_the_rerun_ends_as_an_uninterrupted_run_ledger_included(tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    seed = int(os.environ.get("SKILLOPT_KILL_SEED", "14"))
    rng = random.Random(seed)
    with HoldingServer(Policies(target="rule_gated", answers=answers)) as srv:
        # 1. the reference: one uninterrupted command
        ref_dir = _finish(srv.base_url, tmp_path, tmp_path / "ref", resumed=False)
        ref_served = srv.served()
        total = srv.answered
        assert _ledger(ref_dir) == ref_served
        kill_points = sorted(rng.sample(range(1, total), 2))
        startup_delay = rng.uniform(0.0, 1.5)
        settles = [rng.uniform(0.2, 0.8) for _ in kill_points]
        print(
            f"SKILLOPT_KILL_SEED={seed}: reference {total} calls; kills 1 at MLflow store creation +{startup_delay:.2f} s, then after "
            + ", ".join(f"{n} answers +{s:.2f} s" for n, s in zip(kill_points, settles))
        )

        # 2. the same command elsewhere, killed; the endpoint's counts start again from zero
        srv.reset()
        out = tmp_path / "out"
        # while the run starts (no answer at all in this command: they wait for the kill)
        srv.mode = "hold"
        p = _cli(srv.base_url, tmp_path, out)
        actors: set[int] = set()
        killed_at = _kill_when(
            p, lambda: bool(list(out.glob(".mlflow.db.building-*"))), "the MLflow store was made", startup_delay, actors
        )
        assert not (out / "mlflow.db").exists() or store_state(out / "mlflow.db")[0] == "ok"
        time.sleep(max(0.0, killed_at + 1.0 - time.monotonic()))
        assert not _running(actors), "actors of the run killed at start-up still run 1 s later"
        held = srv.refuse_waiting()
        print(f"  kill 1: {len(actors)} actors up, {held} requests waiting")
        assert srv.answered == 0
        # then at the chosen numbers of answers: the answers stop there, the run goes on a moment, the kill
        for n, settle in zip(kill_points, settles):
            srv.hold_at = n
            p = _cli(srv.base_url, tmp_path, out)
            actors = set()
            killed_at = _kill_when(p, lambda: srv.mode == "hold", f"{n} answers", settle, actors)
            assert srv.answered == n
            assert len(actors) >= 3, actors
            print(f"  kill after {n} answers (the last for {srv.last_answered}), {srv.undecided} requests waiting")
            held += srv.undecided
            _after_kill(srv, actors, killed_at)
        # 3. the same command again finishes the run
        run_dir = _finish(srv.base_url, tmp_path, out, resumed=True)
        served = srv.served()

    # the run's results, as the uninterrupted run's
    assert _decisions(run_dir) == _decisions(ref_dir)
    summary, ref_summary = (json.loads((d / "summary.json").read_text()) for d in (run_dir, ref_dir))
    assert (summary["selection"], summary["test"], summary["versions"]) == (
        ref_summary["selection"],
        ref_summary["test"],
        ref_summary["versions"],
    )
    final = f"skills/skill_v{ref_summary['versions']['final']:04d}.md"
    assert (run_dir / final).read_text() == (ref_dir / final).read_text()
    # the ledger: exactly what the endpoint answered over the four commands, and nothing paid twice
    assert _ledger(run_dir) == served
    # every request the endpoint held at a kill (sent, never answered to the dead process) is counted as lost
    assert summary["tokens"]["lost"] >= held and ref_summary["tokens"]["lost"] == 0, (summary["tokens"], held)
    assert served == ref_served
    # and the rest of the run directory
    got, want = _comparable(run_dir), _comparable(ref_dir)
    assert sorted(got) == sorted(want)
    differ = [f for f in want if got[f] != want[f]]
    assert not differ, (
        f"{differ} differ from the uninterrupted run's; the first:\n"
        + "".join(
            difflib.unified_diff(
                want[differ[0]].splitlines(True), got[differ[0]].splitlines(True), "uninterrupted", "killed", n=1
            )
        )[:3000]
    )
    assert _cache(run_dir) == _cache(ref_dir)
