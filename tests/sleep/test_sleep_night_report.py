"""A night's report reads its run through RunDir and calls a step accepted by the records' one definition."""

from __future__ import annotations

from skillopt_ray.runs.records import GateRecord
from skillopt_ray.runs.rundir import RunDir
from skillopt_ray.sleep.night.report import build_report

SPLITS = {"train": ["t1", "t2"], "val": ["v1"], "test": []}


def _run(tmp_path, *gates: GateRecord) -> RunDir:
    rd = RunDir(tmp_path / "run")
    rd.root.mkdir()
    for step, gate in enumerate(gates, start=1):
        rd.write_gate(0, step, gate)
    return rd


def test_a_forced_accept_is_an_accepted_night(tmp_path):
    test = {"mean_diff": 0.25, "lo": 0.05, "hi": 0.45, "episodes": 8}
    rd = _run(
        tmp_path, GateRecord(action="reject", reason="no gain"), GateRecord(action="force_accept", gate_test=test)
    )
    rep = build_report(rd.root, "n1", SPLITS, looks=1, looks_max=5, borrowed=False)
    assert [(g.step, g.action) for g in rep.gates] == [("e00_s001", "reject"), ("e00_s002", "force_accept")]
    assert rep.gates[0].reason == "no gain" and rep.gates[1].mean_diff == 0.25 and rep.gates[1].episodes == 8
    assert rep.changed and rep.verdict == "accepted"
    assert build_report(rd.root, "n1", SPLITS, 1, 5, borrowed=True).verdict == "unverified"


def test_a_night_of_rejects_and_skips_changes_nothing(tmp_path):
    rd = _run(tmp_path, GateRecord(action="reject"), GateRecord(action="skip"))
    (rd.root / "steps" / "notes").mkdir()  # a folder that is no step's is not read as one
    rep = build_report(rd.root, "n2", SPLITS, looks=2, looks_max=5, borrowed=False)
    assert [g.action for g in rep.gates] == ["reject", "skip"]
    assert not rep.changed and rep.verdict == "rejected" and rep.tasks == {"train": 2, "val": 1, "test": 0}
