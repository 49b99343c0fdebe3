"""`schedule`/`unschedule`: one line in the user's crontab, between markers naming the project's hash, that runs a
night each day; `--print` shows it and a systemd user timer instead of installing anything. The line repeats the
project's last `run` (skillopt_ray.sleep.night.settings): its flags and model settings, the folder it ran from and
the environment its config read, since cron gives a job almost none (`HOME`, `PATH=/usr/bin:/bin`, `SHELL`)."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

from skillopt_ray.sleep.night.settings import NightSettings
from skillopt_ray.sleep.night.settings import load as load_settings

DEFAULT_HOUR, DEFAULT_MINUTE = 3, 41  # an off hour, not on the minute most jobs pick


def project_tag(project: Path) -> str:
    return hashlib.sha256(str(project).encode()).hexdigest()[:16]


def markers(project: Path) -> tuple[str, str]:
    tag = project_tag(project)
    return f"# >>> skillopt-ray sleep {tag} >>>", f"# <<< skillopt-ray sleep {tag} <<<"


def refuse_control(*texts: str) -> None:
    for t in texts:
        if any(ord(c) < 32 or ord(c) == 127 for c in t):
            raise ValueError(f"{t!r} holds a control character (a newline, a tab...); cron cannot run it, rename it")


def night_command(project: Path, python: str, st: NightSettings) -> str:
    """The shell command of the night `st` describes, every word quoted for sh, its environment set in front."""
    refuse_control(str(project), python, st.cwd, *st.argv, *st.env, *st.env.values())
    log = project / ".skillopt" / "cron.log"
    q = shlex.quote
    env = "".join(f"{name}={q(value)} " for name, value in sorted(st.env.items()))
    run = f"{env}{q(python)} -m skillopt_ray.sleep run {' '.join(q(a) for a in st.argv)}"
    return f"cd {q(st.cwd)} && {run} >> {q(str(log))} 2>&1"


def cron_line(project: Path, hour: int, minute: int, python: str, st: NightSettings) -> str:
    """cron turns an unescaped `%` into a newline, even inside quotes: each is escaped."""
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        raise ValueError(f"--hour {hour} --minute {minute} is not a time of day; give 0-23 and 0-59")
    return f"{minute} {hour} * * * " + night_command(project, python, st).replace("%", "\\%")


def block(project: Path, hour: int, minute: int, python: str, st: NightSettings) -> str:
    begin, end = markers(project)
    return f"{begin}\n{cron_line(project, hour, minute, python, st)}\n{end}\n"


def without_block(table: str, project: Path) -> tuple[str, bool]:
    """The crontab with this project's block taken out (every copy), and whether there was one."""
    begin, end = markers(project)
    out, inside, found = [], False, False
    for line in table.splitlines():
        if line.strip() == begin:
            inside, found = True, True
        elif line.strip() == end and inside:
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"the crontab has {begin!r} without its end marker; fix it with `crontab -e`")
    return "".join(f"{ln}\n" for ln in out), found


def read_crontab() -> str:
    try:
        p = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ValueError("no `crontab` command on this machine; use --print and install the systemd timer") from None
    if p.returncode != 0:
        if "no crontab" in p.stderr.lower():
            return ""
        raise ValueError(f"`crontab -l` failed: {p.stderr.strip()[:200]}")
    return p.stdout


def write_crontab(table: str) -> None:
    p = subprocess.run(["crontab", "-"], input=table, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise ValueError(f"`crontab -` refused the new table: {p.stderr.strip()[:200]}")


def systemd_units(project: Path, hour: int, minute: int, python: str, st: NightSettings) -> str:
    """A user service and timer; `%` and `$` doubled and the command double-quoted for systemd's own parser."""
    cmd = night_command(project, python, st)
    quoted = '"' + cmd.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$") + '"'
    name = f"skillopt-sleep-{project_tag(project)}"
    return (
        f"# ~/.config/systemd/user/{name}.service\n[Unit]\nDescription=skillopt-ray sleep night\n\n"
        f"[Service]\nType=oneshot\nExecStart=/bin/sh -c {quoted}\n\n"
        f"# ~/.config/systemd/user/{name}.timer\n[Unit]\nDescription=skillopt-ray sleep nightly\n\n"
        f"[Timer]\nOnCalendar=*-*-* {hour:02d}:{minute:02d}:00\nPersistent=true\n\n"
        "[Install]\nWantedBy=timers.target\n\n"
        f"# then: systemctl --user daemon-reload && systemctl --user enable --now {name}.timer\n"
    )


def schedule(
    project: Path, hour: int = DEFAULT_HOUR, minute: int = DEFAULT_MINUTE, only_print: bool = False,
    python: Optional[str] = None,
) -> str:  # fmt: skip
    """Installs (or replaces) this project's block, the night of its last `run`; the same call twice leaves one
    block. Refused (one line) when no night has run here: a line with no settings would mine with the embedded
    model and never train."""
    project = project.resolve()
    st = load_settings(project)
    if st is None:
        raise ValueError(
            f"no night has run for {project} yet: run one (python -m skillopt_ray.sleep run --project ... with your "
            "model settings and caps); `schedule` repeats the settings of the last run"
        )
    py = python or sys.executable
    new = block(project, hour, minute, py, st)
    keys = keys_note(st)
    if only_print:
        return f"# crontab (crontab -e):\n{new}\n{systemd_units(project, hour, minute, py, st)}{keys}"
    table, _ = without_block(read_crontab(), project)
    write_crontab(table + new)
    return (
        f"scheduled a night for {project} at {hour:02d}:{minute:02d} each day, with the settings of the run of "
        f"{st.saved[:19] or 'unknown date'} (log: .skillopt/cron.log){keys}"
    )


def keys_note(st: NightSettings) -> str:
    """Where the line's keys come from: cron passes none, and the line holds names, never values."""
    if not st.key_names:
        return ""
    names = ", ".join(st.key_names)
    return (
        f"\n# the night reads its keys from {names} (a local server may need none); cron passes no environment, so "
        "set them at the top of the crontab (crontab -e) or in the timer's EnvironmentFile"
    )


def unschedule(project: Path) -> str:
    project = project.resolve()
    refuse_control(str(project))
    table, found = without_block(read_crontab(), project)
    if not found:
        return f"nothing was scheduled for {project}"
    write_crontab(table)
    return f"unscheduled the nightly run for {project}"
