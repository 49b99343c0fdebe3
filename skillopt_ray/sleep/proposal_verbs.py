"""The verbs `status`, `adopt`, `schedule`, `unschedule`: their flags and their one-line refusals (exit 2)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_OK
from skillopt_ray.sleep.night import schedule
from skillopt_ray.sleep.proposal import adopt_skills, status
from skillopt_ray.sleep.proposal.lock import Busy

VERBS = ("status", "adopt", "schedule", "unschedule")


def add_verbs(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("status", help="staged nights, their scores, what is pending")
    s.add_argument("--json", action="store_true")
    a = sub.add_parser("adopt", help="install a staged night's skill (a transaction), or --undo it")
    a.add_argument(
        "--night", help="the night's stamp (default: the newest pending one; with --undo the newest adopted)"
    )
    a.add_argument("--undo", action="store_true", help="restore what the night's adoption replaced")
    a.add_argument("--skill", help="of a night that trained several skills, only this one (default: all of them)")
    a.add_argument("--allow-unverified", action="store_true", help="adopt a night whose gate judged on borrowed tasks")
    a.add_argument("--allow-flagged", action="store_true", help="adopt a night whose added rules were flagged")
    c = sub.add_parser("schedule", help="a nightly run in your crontab (or --print it and a systemd timer)")
    c.add_argument("--print", dest="only_print", action="store_true", help="print the lines, install nothing")
    c.add_argument("--hour", type=int, default=schedule.DEFAULT_HOUR)
    c.add_argument("--minute", type=int, default=schedule.DEFAULT_MINUTE)
    sub.add_parser("unschedule", help="remove the nightly run from your crontab")
    for p in (s, a, c, sub.choices["unschedule"]):
        p.add_argument("--project", type=Path, help="the project (default: the current repository's root)")


def dispatch(a: argparse.Namespace, project: Path) -> int:
    try:
        if not project.is_dir():
            raise ValueError(f"--project {project} is not a folder; give the project's folder")
        if a.verb == "status":
            out = status.status(project, a.json)
        elif a.verb == "adopt":
            out = adopt_skills.dispatch(project, a.night, a.skill, a.undo, a.allow_unverified, a.allow_flagged)
        elif a.verb == "schedule":
            out = schedule.schedule(project, a.hour, a.minute, a.only_print)
        else:
            out = schedule.unschedule(project)
    except (ValueError, Busy, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    print(out)
    return EXIT_OK
