"""The front door, one module per job:

- `compose`     compose the config with Hydra and validate it into the typed Config (schema, ranges, prices)
- `checks`      checks that need no cluster (output folder, keys, skill files)
- `preflight`   every check of a run, made once: `preflight(config) -> Checked`, what `execute` runs
- `identity`    what a run's identity covers beyond its config, and the resume check
- `ray_session` start a private Ray cluster or join one
- `launch`      one run: its directory, the embedded server, Ray, the driver actor (`execute`)
- `report`      what is printed when a run ends
- `app`         the Hydra application (`python -m skillopt_ray`)
- `hydra_jobs`  `-m` and Hydra's own settings: each job composed once, that composition checked and run by Hydra
- `handoff`     a checked run handed to a process of its own (the dashboard's launches)

The names below are the ones other modules and tests use.
"""

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from skillopt_ray.cli.checks import check_keys, check_output_dir, check_skill_files, needs_embedded_server
from skillopt_ray.cli.compose import (
    CONF_DIR,
    absolute,
    compose,
    compose_node,
    experiments,
    load,
    plain,
    resolve_paths,
    typed,
)
from skillopt_ray.cli.errors import UsageError
from skillopt_ray.cli.launch import execute, run_dir_for, run_one
from skillopt_ray.cli.preflight import Checked, preflight
from skillopt_ray.cli.ray_session import start_ray
from skillopt_ray.cli.report import summary_table


def main(argv=None) -> int:
    from skillopt_ray.cli.app import main as app_main

    return app_main(argv)


__all__ = [
    "CONF_DIR",
    "Checked",
    "EXIT_CONFIG",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_STOPPED",
    "UsageError",
    "absolute",
    "check_keys",
    "check_output_dir",
    "check_skill_files",
    "compose",
    "compose_node",
    "execute",
    "experiments",
    "load",
    "main",
    "needs_embedded_server",
    "plain",
    "preflight",
    "resolve_paths",
    "run_dir_for",
    "run_one",
    "start_ray",
    "summary_table",
    "typed",
]
