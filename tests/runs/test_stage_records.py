"""Typed stage records read and write run directories byte for byte as before they were typed.

tests/fixtures/stage_records/ holds the stage records (reflect, aggregate, select, update, gate, appendix notes)
that the scripted runs of tests/stage_record_runs.py wrote with the untyped stages; each must round-trip through
its record class to the same bytes, and today's stages must write the same files again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stage_record_runs import VARIANTS, run_variant, stage_files

from skillopt_ray.base.io import atomic_write_json
from skillopt_ray.runs.records import GateRecord
from skillopt_ray.stages.aggregate import AggregateOutput
from skillopt_ray.stages.appendix import FlushResult
from skillopt_ray.stages.reflect import ReflectOutput
from skillopt_ray.stages.select import SelectOutput
from skillopt_ray.stages.update import UpdateOutput

FIXTURES = Path(__file__).parent.parent / "fixtures" / "stage_records"
CODECS: dict[str, Callable[[Any], Any]] = {
    "reflect": ReflectOutput.from_dict,
    "aggregate": AggregateOutput.from_dict,
    "select": SelectOutput.from_dict,
    "update": UpdateOutput.from_dict,
    "gate": GateRecord.from_dict,
    "appendix_notes": FlushResult.from_dict,
}
FILES = sorted(FIXTURES.glob("*/*/*.json"))


def test_every_stage_and_mode_has_a_fixture():
    stages = {p.stem for p in FILES}
    assert stages == set(CODECS)
    assert {p.parent.parent.name for p in FILES} == set(VARIANTS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: "/".join(p.parts[-3:]))
def test_stage_record_round_trips_to_the_same_bytes(path: Path, tmp_path: Path):
    record = CODECS[path.stem](json.loads(path.read_text()))
    assert not isinstance(record, dict)  # a typed record, not the dict it was read from
    out = tmp_path / path.name
    atomic_write_json(out, record.to_dict())
    assert out.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_resumed_step_reads_the_untyped_records_and_calls_no_optimizer(variant: str, tmp_path: Path):
    """A run killed after step 1's stages (their records written by the untyped code) resumes from them."""
    step1 = FIXTURES / variant / "e01_s001"
    rd, llm = run_variant(tmp_path, variant, seed_from=step1)
    assert not [k for k in llm.keys if k.startswith("train/e1s1/")]
    assert [k for k in llm.keys if k.startswith("train/e1s2/")]  # the next step ran its stages
    for p in step1.iterdir():
        assert (rd.root / "steps" / step1.name / p.name).read_bytes() == p.read_bytes()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_stages_write_the_records_the_untyped_stages_wrote(variant: str, tmp_path: Path):
    rd, _ = run_variant(tmp_path, variant)
    written = {f"{p.parent.name}/{p.name}": p.read_bytes() for p in stage_files(rd)}
    expected = {f"{p.parent.name}/{p.name}": p.read_bytes() for p in FIXTURES.glob(f"{variant}/*/*.json")}
    assert written.keys() == expected.keys()
    for name, data in expected.items():
        assert written[name] == data, f"{variant}/{name} differs from the untyped stages' file"
