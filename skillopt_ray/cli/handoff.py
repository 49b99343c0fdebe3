"""A checked run handed to a process of its own: `python -m skillopt_ray.cli.handoff` reads it on its standard input.

The dashboard composes, validates and checks a form's run once (cli.compose, cli.preflight) and starts it as a
process of its own (stopped with Ctrl-C's signal, its output followed): that process takes the `Checked` it was
handed instead of composing and checking the same command again. The pipe is the parent's own (nothing else can
write it); the config is rebuilt from it field by field (config.from_container), not validated again.
What the run records as its command (provenance) is the command line that reruns it, `python -m skillopt_ray ...`.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Optional, TypedDict

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_STOPPED
from skillopt_ray.cli.errors import UsageError
from skillopt_ray.cli.preflight import Checked
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.skill_files import SkillTexts

ENTRY = "python -m skillopt_ray"  # the command a handed run is (its provenance), not this module


def command_argv(overrides: list[str]) -> list[str]:
    """The argv of `python -m skillopt_ray OVERRIDES`, as that command would see it."""
    from pathlib import Path

    import skillopt_ray

    return [str(Path(skillopt_ray.__file__).parent / "__main__.py"), *overrides]


class Handed(TypedDict):
    """What the parent writes: the checked config as plain data, the skill documents as read, the run's command."""

    data: PlainConfig
    skills: SkillTexts
    overrides: list[str]  # the command's overrides (the run's provenance)
    argv: list[str]  # the command line that reruns it


def encode(checked: Checked, overrides: list[str], argv: list[str]) -> bytes:
    return json.dumps(Handed(data=checked.data, skills=checked.skills, overrides=overrides, argv=argv)).encode()


def decode(raw: bytes) -> tuple[Checked, list[str], list[str]]:
    """The handed run: (its Checked, its overrides, its command line)."""
    from skillopt_ray.config import from_container

    handed: Handed = json.loads(raw)
    data = handed["data"]
    return Checked(from_container(data), data, dict(handed["skills"])), list(handed["overrides"]), list(handed["argv"])


def main(stream: Optional[IO[bytes]] = None) -> int:
    """Run the checked config read from `stream` (default: standard input); returns the exit code."""
    from skillopt_ray.cli.launch import execute
    from skillopt_ray.cli.report import report

    checked, overrides, argv = decode((stream or sys.stdin.buffer).read())
    try:
        return report(execute(checked, None, {"overrides": overrides, "argv": argv, "entry": ENTRY}))
    except UsageError as e:  # a problem found once the run started (Ray unreachable): one line, as the CLI says it
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return EXIT_STOPPED
    except Exception as e:  # noqa: BLE001 - one line, as the CLI says it
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"error: {type(e).__name__}: {first}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
