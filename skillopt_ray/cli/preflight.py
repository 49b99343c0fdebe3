"""Every check a run needs before Ray starts, made once: `preflight(config) -> Checked`.

A `Checked` is the only thing `launch.execute` runs: whoever holds one has had its config composed, validated
and checked (the CLI, `-m`, each sweep trial, a night, transfer all come through here), so nothing downstream
checks again and nothing needs to be told that the checks were made. It carries what the checks read, so it is
not read again: the skill documents' text goes to the identity record and to the driver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import skillopt_ray.cli.checks as checks
from skillopt_ray.cli.compose import absolute, plain
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.schema import Config
from skillopt_ray.config.skill_files import SkillTexts


@dataclass(frozen=True)
class Checked:
    """A run's config after every check: typed (`config`, absolute paths), as plain data (`data`, the same
    values), and the skill documents' text as the check read them (`skills`, by config key)."""

    config: Config
    data: PlainConfig
    skills: SkillTexts = field(default_factory=dict)

    def with_data(self, data: PlainConfig) -> Checked:
        """The same checked run with settings its launcher owns changed (a sweep's tags, the shared model server's
        URL); the config is rebuilt from them field by field, not validated or checked again."""
        from skillopt_ray.config import from_container

        return Checked(from_container(data), data, self.skills)


def preflight(
    config: Config,
    data_seen: Optional[set[str]] = None,
    skills: Optional[SkillTexts] = None,
    make_output: bool = True,
) -> Checked:
    """Check a validated config for a run, once: its skill files, its agent CLI, the embedded model, the review of
    harvested tasks, its benchmark data, its output folder and the endpoints' keys. Raises UsageError (one line).

    `data_seen`: data already read by an earlier job of the same command (jobs reading the same splits read once).
    `skills`: the skill documents as `checks.check_skill_files` already read them for this config (a sweep reads
    them when it plans its trials, to name their run directories): not read again.
    `make_output`: False leaves no folder behind (the dashboard checks a form it may not launch): the output folder
    is then only shown to be one that can be made."""
    config = absolute(config)
    data = plain(config)
    if skills is None:
        skills = checks.check_skill_files(data)
    checks.check_harness(data)  # a missing agent CLI: one line before Ray, not a failed episode after it
    checks.check_embedded_model(data)  # llm=local without its installed model: the install command, before Ray
    checks.check_reviewed_tasks(data)  # harvested sessions leave the machine only once a person has read them
    seen = json.dumps([data["env"], checks.run_splits(data)], sort_keys=True, default=str)
    if data_seen is None or seen not in data_seen:
        checks.check_benchmark_data(data)
        if data_seen is not None:
            data_seen.add(seen)
    checks.check_output_dir(Path(data["output_dir"]), create=make_output)
    checks.check_endpoints(data)
    return Checked(config, data, skills)
