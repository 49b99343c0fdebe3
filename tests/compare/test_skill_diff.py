"""Two runs' skills compared: `python -m skillopt_ray.report RUN_A --diff-skill RUN_B`, and the sweep's
skill_diffs.md (logged to the sweep's MLflow parent with its comparison)."""

from __future__ import annotations

from pathlib import Path

from report_helpers import make_run

from skillopt_ray.compare import command as compare
from skillopt_ray.runs import report
from skillopt_ray.sweep.command import write_skill_diffs


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    (a / "best_skill.md").write_text("# Skill\n- RULE-heat: use the microwave\n- look first\n")
    (b / "best_skill.md").write_text("# Skill\n- RULE-heat: use the stove\n- look first\n")
    return a, b


def test_report_diffs_two_runs_best_skills(tmp_path, capsys):
    a, b = _two_runs(tmp_path)
    assert report.main([str(a), "--diff-skill", str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A: a (best selection") and "\nB: b (" in out
    assert "-- RULE-heat: use the microwave\n" in out and "+- RULE-heat: use the stove\n" in out
    assert " - look first\n" in out  # unchanged lines as context
    assert report.main([str(a), "--diff-skill", str(a)]) == 0 and "identical" in capsys.readouterr().out
    assert report.main([str(a), "--diff-skill", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope is not a run directory" in err[0]


def test_sweep_writes_each_runs_best_skill_against_the_top_run(tmp_path):
    a, b = _two_runs(tmp_path)

    def rec(lr: str, sel: float, rd: Path) -> compare.Record:
        return compare.Record({"lr": lr}, 1, {"best_selection_score": sel}, run_dir=str(rd))

    path = tmp_path / "skill_diffs.md"
    assert write_skill_diffs([rec("2", 0.5, a), rec("4", 0.75, b)], path) == path
    text = path.read_text()
    assert "A is lr=4 seed=1" in text and "## lr=2 seed=1" in text
    assert "-- RULE-heat: use the stove" in text and "+- RULE-heat: use the microwave" in text
    assert write_skill_diffs([rec("2", 0.5, a)], path) is None and not path.exists()
