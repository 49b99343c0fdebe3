"""One composition, one validation and one run of each check per job, whatever the entry: a plain command, `-m`, a
sweep trial, a night, transfer. The skill file is read once (its text goes on to the identity and the driver).

Counted in this process by wrappers around Hydra's composition (`Hydra.compose_config`, what `cli.compose` and
Hydra's own application call; `load_sweep_config`, what Hydra's launcher calls per `-m` job), the validation
(`config.validate`, which `typed` calls) and each check that `cli.preflight` runs. The run itself stops
where Ray would start (`launch._drive` records what the driver would get), so the test needs no cluster."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from conftest import qa_fixture
from sleep_fixtures import task_folder

from skillopt_ray import cli
from skillopt_ray.cli import checks, launch
from skillopt_ray.config import Config

CHECKS = (
    "check_skill_files",
    "check_harness",
    "check_embedded_model",
    "check_reviewed_tasks",
    "check_benchmark_data",
    "check_output_dir",
    "check_endpoints",
)
LLM = ["llm=compatible", "llm.base_url=http://127.0.0.1:9/v1", "tracking=none", "debug.progress=off"]


@pytest.fixture()
def counted(monkeypatch, tmp_path):
    """Counters of compositions, validations, checks and skill-file reads; the driver's arguments per run."""
    import skillopt_ray.config as config_pkg

    seen: collections.Counter[str] = collections.Counter()
    drives: list[Any] = []

    def wrap(owner: Any, name: str, key: str) -> None:
        real = getattr(owner, name)

        def counting(*a: Any, **k: Any) -> Any:
            seen[key] += 1
            return real(*a, **k)

        monkeypatch.setattr(owner, name, counting)

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra

    wrap(Hydra, "compose_config", "composed")
    wrap(ConfigLoaderImpl, "load_sweep_config", "hydra_job_composed")
    wrap(config_pkg, "validate", "validated")
    for name in CHECKS:
        wrap(checks, name, name)
    skill = tmp_path / "skill.md"
    skill.write_text("# Skill\n\nAnswer inside <answer> tags.\n")
    real_read = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == skill.name:
            seen["skill_read"] += 1
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: read_bytes(self).decode(*a, **k))

    def drive(checked: Any, run_dir: Path, embedded: Any, progress: Any, clock: Any, engine: Any = None) -> dict:
        drives.append(checked)
        return {"status": "error", "exit": cli.EXIT_STOPPED, "message": "stopped where Ray would start", "notes": []}

    monkeypatch.setattr(launch, "_drive", drive)
    return seen, drives, skill


def _counts(
    seen: collections.Counter[str], composed: int, validated: int, checks: int, data_reads: int, skill_reads: int
) -> None:
    assert (seen["composed"], seen["validated"], seen["skill_read"]) == (composed, validated, skill_reads), seen
    for name in CHECKS:
        assert seen[name] == (data_reads if name == "check_benchmark_data" else checks), (name, seen)


def _driver_gets_the_typed_config(drives: list[Any], skill: Path) -> None:
    for checked in drives:
        assert isinstance(checked, cli.Checked) and isinstance(checked.config, Config)
        assert dataclasses.asdict(checked.config) == checked.data  # the same values, made once
        assert checked.skills[next(iter(checked.skills))] == skill.read_bytes().decode()


def _qa(tmp_path: Path) -> list[str]:
    qa_fixture(tmp_path / "qa")
    return ["+experiment=searchqa", f"env.data_dir={tmp_path / 'qa'}", "env.options.split_source=folders"]


def test_a_plain_command_composes_validates_and_checks_once(counted, tmp_path):
    seen, drives, skill = counted
    code = cli.main([*_qa(tmp_path), *LLM, f"skill_init={skill}", f"output_dir={tmp_path / 'out'}"])
    assert code == cli.EXIT_STOPPED and len(drives) == 1
    _counts(seen, composed=1, validated=1, checks=1, data_reads=1, skill_reads=1)
    _driver_gets_the_typed_config(drives, skill)


def test_each_job_of_a_multirun_is_composed_validated_and_checked_once(counted, tmp_path):
    seen, drives, skill = counted
    code = cli.main(
        [*_qa(tmp_path), *LLM, f"skill_init={skill}", f"output_dir={tmp_path / 'out'}", "-m", "seed=1,2",
         f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    )  # fmt: skip
    assert code == cli.EXIT_STOPPED and len(drives) == 2
    # ours: each job composed, validated and checked once before any starts (jobs reading the same data and splits
    # read them once), and the task function takes the job's checked config without validating it again; Hydra's
    # own application layer composes the sweep twice and each job twice more (its .hydra/ record), not validated
    _counts(seen, composed=2 + 2, validated=2, checks=2, data_reads=1, skill_reads=2)
    assert seen["hydra_job_composed"] == 2 * 2
    _driver_gets_the_typed_config(drives, skill)


def test_a_sweep_trial_is_composed_validated_and_checked_once(counted, tmp_path, monkeypatch):
    from skillopt_ray.sweep import command, tune

    seen, drives, skill = counted

    def run_tune(spec, trials, overrides, name, sdir, parent, previous):  # Tune's part: each trial's execute()
        ctx = {"name": name, "parent_run_id": None, "server_url": None}
        for plan in tune._trial_plans(spec, trials, overrides, ctx).values():  # type: ignore[arg-type]
            launch.execute(plan["checked"], Path(plan["run_dir"]), plan.get("origin"))
        return []

    monkeypatch.setattr(command, "_run_tune", run_tune)
    from skillopt_ray.sweep.command import main as sweep_main

    sweep_main([*_qa(tmp_path), *LLM, f"skill_init={skill}", f"output_dir={tmp_path / 'out'}", "sweep.seeds=2"])
    assert len(drives) == 2
    # each trial's composition; besides them the sweep's own options and its base config (for its seed: not
    # validated); trials reading the same data and splits read them once; a trial's skill file is hashed for its
    # run directory's name when the sweep is planned (dry runs too), then read by its check
    _counts(seen, composed=2 + 2, validated=2, checks=2, data_reads=1, skill_reads=2 * 2)
    _driver_gets_the_typed_config(drives, skill)


def test_a_night_is_composed_validated_and_checked_once_its_review_gate_included(counted, tmp_path):
    from skillopt_ray.sleep import cli as sleep_cli

    seen, drives, _skill = counted
    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project, n_val=2)
    code = sleep_cli.main(
        ["run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks"), *LLM]
    )  # fmt: skip
    assert code == cli.EXIT_STOPPED and len(drives) == 1
    # the first night starts from the empty seed: no skill file
    _counts(seen, composed=1, validated=1, checks=1, data_reads=1, skill_reads=0)
    assert isinstance(drives[0].config, Config)


def test_each_transfer_cell_is_composed_validated_and_checked_once(counted, tmp_path):
    from skillopt_ray.compare import transfer

    seen, drives, skill = counted
    qa = _qa(tmp_path)
    transfer.main(
        ["--skills", str(skill), "--targets", "chat", "--benchmarks", "searchqa", "--out", str(tmp_path / "t"), "--",
         *qa[1:], *LLM]
    )  # fmt: skip
    assert len(drives) == 1
    _counts(seen, composed=1, validated=1, checks=1, data_reads=1, skill_reads=1)
    _driver_gets_the_typed_config(drives, skill)


def test_the_driver_takes_the_typed_config_without_validating_it_again(tmp_path, monkeypatch):
    import skillopt_ray.config as config_pkg
    import skillopt_ray.config.validation as validation
    from skillopt_ray.engine.driver import Run

    config = cli.compose(["+experiment=searchqa", *LLM, f"output_dir={tmp_path}"])
    for owner in (config_pkg, validation):
        monkeypatch.setattr(owner, "validate", lambda _c: pytest.fail("validated again"))
    run = Run(config, str(tmp_path / "run"), skills={"skill_init": "# given"})
    assert run.cfg is config and run._skill_text("skill_init", "/nowhere.md") == "# given"
