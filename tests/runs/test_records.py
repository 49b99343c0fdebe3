"""Run records: today's run directories (written before records were typed) load, round-trip and resume exactly;
a directory or file that cannot be read says so in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conformance_helpers import make_run

from skillopt_ray.runs import records
from skillopt_ray.runs.records import GateRecord, RecordError, StepRecord, Summary, is_accept
from skillopt_ray.runs.rundir import RunDir  # noqa: E402

LEGACY = Path(__file__).parent.parent / "data" / "rundir_v0"


def _plain(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "schema"}


def test_a_legacy_run_directory_loads_as_typed_records():
    rd = RunDir(LEGACY / "finished").check()
    history = rd.history()
    lines = [json.loads(x) for x in (rd.root / "history.jsonl").read_text().splitlines()]
    assert [h.to_dict() for h in history] == lines  # every key kept, nothing added
    assert [h.action for h in history] == ["reject", "skip_no_patches", "reject", "reject"]
    state = rd.read_state()
    assert state.phase == "done" and state.global_step == 4
    for h in history:
        if h.action.startswith("skip"):
            continue
        gate = rd.read_gate(*h.step_id)
        raw = json.loads((rd.root / rd.step_dir(*h.step_id) / "gate.json").read_text())
        assert _plain(gate.to_dict()) == raw and gate.action == h.action and not gate.accepted
    e2 = rd.epochs()[2]
    assert e2.slow.accepted and e2.slow.new_best and e2.meta.content == "META-E2" and e2.meta_skill == "META-E2"
    assert rd.epochs()[1].slow.action == "inject_placeholder" and rd.epochs()[1].meta.content == ""
    summary = rd.read_summary()
    raw = json.loads(rd.summary_path.read_text())
    assert _plain(summary.to_dict()) == raw and summary.test_score("best") == 1.0
    scores = rd.scores()
    assert scores[state.best_eval].hard == 0.5 and set(scores[state.best_eval].tasks) == {"va0", "va1"}
    assert [v.version for v in rd.skill_versions()] == [0, 1, 2] and rd.finished()


def test_records_round_trip_and_keep_keys_they_do_not_model():
    rec = StepRecord(step=3, epoch=1, step_in_epoch=3, action="accept", extra={"added_later": 7})
    back = StepRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back == rec and back.extra == {"added_later": 7} and "schema" not in back.to_dict()  # schema 1: no key
    assert back.metrics()["added_later"] == 7.0 and back.metrics()["accepted"] == 1.0 and "step" not in back.metrics()
    skipped = GateRecord(action=records.SKIP_NO_REWRITE)
    assert skipped.to_dict() == {"action": "skip_no_rewrite"}


def test_one_definition_of_an_accept():
    assert [a for a in ("accept", "accept_new_best", "force_accept", "reject", "skip_no_patches") if is_accept(a)] == [
        "accept",
        "accept_new_best",
        "force_accept",
    ]
    forced_above = GateRecord(action="force_accept", candidate_score=0.6, current_score=0.5, best_score=0.55)
    forced_below = GateRecord(action="force_accept", candidate_score=0.5, current_score=0.6, best_score=0.7)
    assert forced_above.new_best and not forced_below.new_best and forced_below.accepted


def test_unreadable_files_and_folders_say_so_in_one_line(tmp_path):
    with pytest.raises(RecordError, match="not a run directory") as e:
        RunDir(tmp_path / "nope").check()
    assert "\n" not in str(e.value)
    with pytest.raises(RecordError, match="newer than this skillopt-ray reads") as e:
        Summary.from_dict({"schema": 99, "experiment": "x"}, "summary.json")
    assert "\n" not in str(e.value) and "summary.json" in str(e.value)
    with pytest.raises(RecordError, match="lacks step"):
        StepRecord.from_dict({"action": "reject"})
    run = tmp_path / "run"
    shutil.copytree(LEGACY / "finished", run)
    (run / "summary.json").write_text("{cut")
    with pytest.raises(RecordError, match="summary.json cannot be read as JSON") as e:
        RunDir(run).read_summary()
    assert "\n" not in str(e.value)


def test_a_run_killed_under_the_previous_code_resumes_exactly(tmp_path):
    """The killed directory, resumed by this code, ends where the previous code's uninterrupted run ended."""
    shutil.copytree(LEGACY / "killed", tmp_path / "resumed" / "run")
    make_run(tmp_path / "resumed", epochs=2, train_n=4, samples=2)
    resumed, before = RunDir(tmp_path / "resumed" / "run"), RunDir(LEGACY / "finished")
    assert [_plain(h.to_dict()) for h in resumed.history()] == [_plain(h.to_dict()) for h in before.history()]
    skip = {"run_dir", "wall_time_s", "schema", "intervals"}  # the previous code wrote no intervals
    a = {k: v for k, v in resumed.read_summary().to_dict().items() if k not in skip}
    b = {k: v for k, v in before.read_summary().to_dict().items() if k not in skip}
    assert a == b
    summary = resumed.read_summary()
    for which in ("initial", "best", "final"):  # the intervals are around the scores the summary reports
        iv = summary.interval("test", which)
        assert iv is not None and iv["mean"] == pytest.approx(summary.test_score(which))
        assert iv["lo"] <= iv["mean"] <= iv["hi"] and iv["n"] == summary.test[which]["n_scored"]
    assert before.read_summary().interval("test", "best") is None  # an old summary reads without them
    assert [v.text for v in resumed.skill_versions()] == [v.text for v in before.skill_versions()]
    assert resumed.read_skill(resumed.read_state().best_version) == before.best_skill_path.read_text()


def test_a_bumped_schema_is_written_and_a_newer_one_refused():
    from dataclasses import dataclass

    @dataclass(kw_only=True)
    class GateV2(GateRecord):
        SCHEMA = 2

    rec = GateV2(action="reject", candidate_score=0.5)
    assert rec.to_dict() == {"action": "reject", "candidate_score": 0.5, "schema": 2}
    assert GateV2.from_dict(rec.to_dict()) == rec and GateV2.from_dict({"action": "reject"}).action == "reject"
    with pytest.raises(RecordError, match="GateRecord schema 2 is newer than this skillopt-ray reads \\(1\\)"):
        GateRecord.from_dict(rec.to_dict(), "gate.json")


def test_report_on_a_damaged_run_says_so_in_one_line(tmp_path, capsys):
    from skillopt_ray.runs import report

    run = tmp_path / "run"
    shutil.copytree(LEGACY / "finished", run)
    (run / "steps/e01_s001/gate.json").write_text('{"action": "reject", "schema": 7}')
    assert report.main([str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "gate.json" in err and "newer" in err and "\n" not in err
