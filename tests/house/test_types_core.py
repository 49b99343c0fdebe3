"""The typed records of the run directory, the gate, the launch path and the sweep hold exactly their declared keys.

Each test builds the real object through the product's own code and compares its keys with the TypedDict that
names them, so a key added to the writer but not to the type (or the other way round) fails here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from skillopt_ray.base.stats import GateTestDict, PairedTestDict, paired_test
from skillopt_ray.cli.launch import driver_lost
from skillopt_ray.cli.provenance import collect
from skillopt_ray.compare.stats import Spread, summarize
from skillopt_ray.dashboard.launcher import Launch, LaunchView
from skillopt_ray.engine.envpool import PoolSettings, actor_options
from skillopt_ray.engine.warm import ActorOptions
from skillopt_ray.runs.progress import RunClock
from skillopt_ray.runs.records import GateRecord, Outcome, Provenance, Session, StepRecord, Timing
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.stages.sequential_gate import SequentialOutcome
from skillopt_ray.sweep.report import TrialReport, step_report


def keys_of(td: Any) -> set[str]:
    return set(td.__required_keys__) | set(td.__optional_keys__)


def test_sessions_written_by_the_clock_have_exactly_the_session_keys(tmp_path: Path) -> None:
    clock = RunClock(tmp_path).begin()
    timing = clock.end("ok")
    sessions = RunDir(tmp_path).read_sessions()
    assert len(sessions) == 1
    assert set(sessions[0]) == keys_of(Session)
    assert sessions[0]["status"] == "ok"
    assert set(timing) == keys_of(Timing)
    assert timing["sessions"] == 1


def test_provenance_entry_has_exactly_the_provenance_keys(tmp_path: Path) -> None:
    record = collect(["seed=3"], {"experiment": "x", "llm": {"target": {"api_key": "sk-secret"}}}, ["skillopt-ray"])  # type: ignore[typeddict-item]
    assert set(record) == keys_of(Provenance)
    rd = RunDir(tmp_path)
    rd.write_provenance(record)
    back = rd.read_provenance()
    assert back is not None and set(back) == keys_of(Provenance)
    assert "sk-secret" not in str(back)  # the config is redacted on the way in


def test_paired_gate_record_round_trips_with_its_test_in_field_order() -> None:
    test = paired_test("sign", [1.0, 1.0, 0.0, 1.0, -1.0, 1.0], 0.2).to_dict()
    assert list(test) == list(PairedTestDict.__annotations__)  # the file's key order is the dataclass's
    rec = GateRecord(action="accept", candidate_score=0.7, current_score=0.5, best_score=0.5, gate_test=test)
    back = GateRecord.from_dict(rec.to_dict(), "gate.json")
    assert back == rec
    assert back.gate_test == test


def test_sequential_gate_test_keys_are_declared() -> None:
    out = SequentialOutcome(
        accepted=True, net=3.0, discordant=3, pairs=8, looks=2, episodes=12, first_pass=8, accept_at=3.0,
        reject_at=3.0, final_at=1.0, stopped="accept_boundary", mean_diff=0.375, lo=0.1, hi=0.6, n_tasks=8,
        n_better=3, n_worse=0, p_value=0.125,
    )  # fmt: skip
    test: GateTestDict = out.to_test_dict(0.1)
    assert set(test) <= keys_of(GateTestDict)
    assert keys_of(PairedTestDict) <= set(test)
    assert test["test"] == "sequential" and test["significant"] is True and "accepted" not in test


def test_env_actor_options_use_declared_keys_only() -> None:
    s = PoolSettings(actors=2, episodes_per_actor=3, actor_num_cpus=0.5, episode_timeout_s=60, episode_retries=1)
    spread = actor_options(s, "alfworld_env", [])
    away = actor_options(s, None, ["node-a"])
    for opts in (spread, away):
        assert set(opts) <= keys_of(ActorOptions)
    assert spread == {"num_cpus": 0.5, "max_concurrency": spread["max_concurrency"], "resources": {"alfworld_env": 1.0},
                      "scheduling_strategy": "SPREAD"}  # fmt: skip
    assert "resources" not in away and away["label_selector"] == {"ray.io/node-id": "!in(node-a)"}


def test_launch_and_outcome_views_have_their_declared_keys(tmp_path: Path) -> None:
    view: LaunchView = Launch(id="1", overrides=["+experiment=x"], command="python -m skillopt_ray").to_dict()
    assert set(view) == keys_of(LaunchView)
    lost: Outcome = driver_lost(RuntimeError("\x1b[31mkilled\x1b[0m by a signal"), tmp_path)
    assert set(lost) <= keys_of(Outcome)
    assert lost["status"] == "error" and "\x1b" not in str(lost["message"])


def test_trial_report_and_spread_keys() -> None:
    h = StepRecord(step=2, epoch=1, current_score=0.5, candidate_gate_score=None, best_score=0.6)
    report = step_report(h, "seed=1", Path("/tmp/run"))
    assert set(report) == keys_of(TrialReport) - {"test_hard_best", "test_soft_best"}
    assert math.isnan(report["candidate_score"]) and report["selection_score"] == 0.5
    spread = summarize([0.2, 0.4, 0.6], (0.0, 1.0))
    assert list(spread) == list(Spread.__annotations__)
    assert spread["n"] == 3 and abs(spread["mean"] - 0.4) < 1e-12 and spread["ci_lo"] >= 0.0
