"""`schedule`/`unschedule` against a fake `crontab` on PATH (a script over a file), never the user's own."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.night import schedule, settings

FAKE = """#!/bin/sh
# a crontab stand-in: -l prints the table file, - replaces it from stdin
if [ "$1" = "-l" ]; then
  if [ -f "$FAKE_CRONTAB" ]; then cat "$FAKE_CRONTAB"; else echo "no crontab for tester" >&2; exit 1; fi
elif [ "$1" = "-" ]; then
  cat > "$FAKE_CRONTAB"
else
  exit 9
fi
"""


@pytest.fixture
def crontab(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "crontab").write_text(FAKE)
    (bin_dir / "crontab").chmod(0o755)
    table = tmp_path / "table"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CRONTAB", str(table))
    return table


def ran_here(project: Path) -> Path:
    """A night's settings as `run` keeps them: `schedule` repeats the project's last run."""
    settings.save(project, ["--project", str(project.resolve())], project.resolve(), {})
    return project


def cron_to_shell(line: str) -> str:
    """What cron hands to sh: the five time fields dropped, `\\%` unescaped (an unescaped `%` would end the command)."""
    cmd = line.split(" ", 5)[5]
    assert re.search(r"(?<!\\)%", cmd) is None
    return cmd.replace("\\%", "%")


def test_schedule_is_idempotent_keeps_other_lines_and_unschedule_removes(tmp_path, crontab, capsys):
    crontab.write_text("0 1 * * * echo mine\n")
    project = tmp_path / "proj"
    project.mkdir()
    ran_here(project)
    assert main(["schedule", "--project", str(project), "--hour", "4", "--minute", "5"]) == 0
    assert main(["schedule", "--project", str(project), "--hour", "4", "--minute", "6"]) == 0
    table = crontab.read_text()
    assert table.count(">>> skillopt-ray sleep") == 1 and table.startswith("0 1 * * * echo mine\n")
    assert "\n6 4 * * * cd " in table
    assert main(["unschedule", "--project", str(project)]) == 0
    assert crontab.read_text() == "0 1 * * * echo mine\n"
    assert main(["unschedule", "--project", str(project)]) == 0
    assert "nothing was scheduled" in capsys.readouterr().out


def test_cron_line_quotes_spaces_quotes_and_percent(tmp_path, crontab):
    project = tmp_path / 'it\'s a "project" $HOME %d `x`'
    project.mkdir()
    (project / ".skillopt").mkdir()
    ran_here(project)
    recorder = tmp_path / "fake python's dir" / "py"
    recorder.parent.mkdir()
    out = tmp_path / "argv.json"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$(pwd)" "$@" > "{out}"\n')
    recorder.chmod(0o755)
    schedule.schedule(project, 2, 3, python=str(recorder))
    line = next(ln for ln in crontab.read_text().splitlines() if ln.startswith("3 2 * * * "))
    subprocess.run(["/bin/sh", "-c", cron_to_shell(line)], check=True)
    got = out.read_text().splitlines()
    assert got == [str(project.resolve()), "-m", "skillopt_ray.sleep", "run", "--project", str(project.resolve())]


def test_control_characters_and_bad_times_refused(tmp_path, crontab, capsys):
    bad = tmp_path / "a\nb"
    bad.mkdir()
    ran_here(bad)
    assert main(["schedule", "--project", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "control character" in err and "\n" not in err
    ok = tmp_path / "ok"
    ok.mkdir()
    ran_here(ok)
    assert main(["schedule", "--project", str(ok), "--hour", "24"]) == 2
    assert "time of day" in capsys.readouterr().err
    assert not crontab.exists()


def test_print_installs_nothing_and_shows_a_timer(tmp_path, crontab, capsys):
    project = tmp_path / "p 100%"
    project.mkdir()
    ran_here(project)
    assert main(["schedule", "--project", str(project), "--print"]) == 0
    out = capsys.readouterr().out
    assert not crontab.exists()
    assert "OnCalendar=*-*-* 03:41:00" in out and "ExecStart=/bin/sh -c " in out and "100%%" in out
    assert "100\\%" in out  # the crontab line escapes cron's %


def test_broken_block_is_refused_not_rewritten(tmp_path, crontab, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    begin, _ = schedule.markers(project.resolve())
    crontab.write_text(f"{begin}\n1 1 * * * true\n")
    assert main(["unschedule", "--project", str(project)]) == 2
    assert "without its end marker" in capsys.readouterr().err
    assert crontab.read_text() == f"{begin}\n1 1 * * * true\n"
