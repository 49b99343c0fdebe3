"""Reporting thresholds decide whether a run stops, not what it computes: raising one (as the refusal advises)
resumes the same run instead of starting a new one that pays for every call again."""

from __future__ import annotations

from conftest import qa_fixture

from skillopt_ray import cli
from skillopt_ray.cli import launch


def test_raising_a_reporting_threshold_keeps_the_run(tmp_path):
    data_dir = tmp_path / "qa"
    qa_fixture(data_dir)
    base = ["+experiment=searchqa", f"env.data_dir={data_dir}", f"output_dir={tmp_path / 'out'}"]
    first = launch.run_dir_for(cli.load(base))
    for key in ("optimizer.max_data_error_fraction=0.9", "optimizer.max_infra_failure_fraction=0.9"):
        assert launch.run_dir_for(cli.load([*base, key])) == first, key
    assert launch.run_dir_for(cli.load([*base, "seed=7"])) != first  # what a run computes still counts
