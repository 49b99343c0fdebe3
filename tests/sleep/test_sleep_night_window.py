"""A night's harvest (issue 43): `run` without --tasks harvests first, in part 1's window."""

from __future__ import annotations

import pytest


@pytest.mark.slow  # two whole nights with the embedded model (about a minute each)
def test_a_second_night_harvests_only_since_the_first_and_rubric_only_tasks_are_judged(tmp_path, capsys):
    """`run` without --tasks harvests first (part 1's window): the second night reads only the session that came
    after the first night's harvest. Heuristic tasks have a rubric only: the judge scores them, so each night runs
    and is staged (it used to refuse with exit 2 before the judge existed)."""
    import datetime as dt
    import json

    from sleep_fixtures import codex_session

    from skillopt_ray.sleep import cli

    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    project.mkdir()
    now = dt.datetime.now(dt.timezone.utc)
    stamp = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"  # noqa: E731
    codex_session(ch, str(project), ["Rename the config loader"], start=stamp(now - dt.timedelta(hours=1)))
    argv = ["run", "--project", str(project), "--codex-home", str(ch), "--claude-home", str(cc), "--no-model"]
    for night, prompt in ((1, ""), (2, "Add a retry to the uploader")):
        if prompt:
            codex_session(ch, str(project), [prompt], start=stamp(dt.datetime.now(dt.timezone.utc)))
        assert cli.main(argv) == 0, capsys.readouterr().err
        out = capsys.readouterr()
        assert "staged in" in out.out + out.err
        rep = json.loads((project / ".skillopt" / "harvest-report.json").read_text())
        assert rep["tasks_new"] == 1 and rep["out_of_window"] == night - 1, (night, rep)
        assert len([p for p in (project / ".skillopt" / "staging").iterdir() if p.is_dir()]) == night
