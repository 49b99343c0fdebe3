"""A file planted in a project's `.skillopt/`, a run folder or a sweep folder as a hard link (a second name of a
file elsewhere: a key, a user's config) is never written through: what the sleep wing rewrites goes via a temporary
file and a rename (which replaces the link), and what is written in place (a lock, an appended log) refuses such a
file in one line or never writes it. A night's own per-skill task folders hold copies, never hard links, so the
careful reader reads them."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
from sleep_fixtures import codex_session, harvest

from skillopt_ray.base import untrusted
from skillopt_ray.base.io import append_json_line
from skillopt_ray.sleep.night import skills_night
from skillopt_ray.sleep.night.report import NightReport, write_report
from skillopt_ray.sleep.night.skill_routes import Route
from skillopt_ray.sleep.proposal.lock import adopt_lock, night_lock

KEPT = "ssh-ed25519 AAAA the user's own key\n"


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file of the user's outside the project, which a planted hard link names."""
    f = tmp_path / "home" / "authorized_keys"
    f.parent.mkdir()
    f.write_text(KEPT)
    return f


def plant(secret: Path, at: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    os.link(secret, at)


@pytest.mark.parametrize("lock", [night_lock, adopt_lock])
def test_a_lock_file_planted_as_a_hard_link_is_refused_and_its_target_kept(tmp_path, secret, lock):
    project = tmp_path / "proj"
    name = "night" if lock is night_lock else "adopt"
    plant(secret, project / ".skillopt" / "locks" / f"{name}.lock")
    with pytest.raises(ValueError, match="hard link") as e:
        with lock(project):
            pass
    assert "\n" not in str(e.value) and f"{name}.lock" in str(e.value)
    assert secret.read_text() == KEPT


def test_a_plain_lock_file_still_locks(tmp_path):
    project = tmp_path / "proj"
    with night_lock(project) as path:
        assert path.read_text() == str(os.getpid())
    with night_lock(project):  # released, taken again
        pass


def test_the_harvest_report_replaces_a_planted_hard_link(tmp_path, secret):
    project, ch = tmp_path / "proj", tmp_path / "codex"
    project.mkdir()
    report = project / ".skillopt" / "harvest-report.json"
    plant(secret, report)
    codex_session(ch, str(project), ["Add a retry to the uploader"])
    harvest(project, ch, tmp_path / "claude")
    assert secret.read_text() == KEPT
    assert os.stat(report).st_nlink == 1 and '"window"' in report.read_text()


def test_a_nights_report_replaces_planted_hard_links(tmp_path, secret):
    night = tmp_path / "run" / "night"
    plant(secret, night / "report.json")
    os.link(secret, night / "report.md")
    write_report(night, NightReport("n1", str(tmp_path / "run"), {"train": 2, "val": 1}))
    assert secret.read_text() == KEPT
    assert "n1" in untrusted.read_text(night, "report.json") and "n1" in untrusted.read_text(night, "report.md")


def test_an_appended_run_log_planted_as_a_hard_link_is_refused(tmp_path, secret):
    run = tmp_path / "run"
    plant(secret, run / "history.jsonl")
    with pytest.raises(ValueError, match="hard link"):
        append_json_line(run / "history.jsonl", {"step": 1})
    assert secret.read_text() == KEPT
    append_json_line(run / "scores.jsonl", {"step": 1})  # a plain file is appended to as before
    append_json_line(run / "scores.jsonl", {"step": 2})
    assert untrusted.read_json_lines(run, "scores.jsonl") == [{"step": 1}, {"step": 2}]


def test_a_skills_nights_task_folders_are_copies_the_careful_reader_reads(tmp_path):
    project, tasks = tmp_path / "proj", tmp_path / "proj" / ".skillopt" / "tasks"
    for tid in ("t1", "t2"):
        (tasks / tid / "workspace").mkdir(parents=True)
        (tasks / tid / "task.md").write_text(f"do {tid}\n")
        (tasks / tid / "workspace" / "a.txt").write_text("data\n")
    (tasks / "review.json").write_text('{"reviewed": true}\n')
    opts = types.SimpleNamespace(project=project)
    out = skills_night.task_folder(opts, tasks, "night-1", Route("fmt", None, ["t1"]))  # type: ignore[arg-type]
    assert sorted(p.name for p in out.iterdir()) == ["review.json", "t1"]
    for rel in ("t1/task.md", "t1/workspace/a.txt", "review.json"):
        assert os.stat(out / rel).st_nlink == 1, rel
        untrusted.read_bytes(out, rel)  # refused if it were a second name of the night's own file
    assert untrusted.read_text(out, "t1/task.md") == "do t1\n"


def test_a_ledger_journal_rewrite_never_writes_a_planted_scratch_name(tmp_path, secret):
    """The journal is started afresh through a file of an unguessable name: the old `<journal>.tmp-<pid>` scratch
    name could be planted beforehand as a hard link to a user's file."""
    from skillopt_ray.config import BudgetConfig
    from skillopt_ray.llm.ledger import Ledger

    journal = tmp_path / "run" / "ledger.journal"
    plant(secret, journal.with_name(f"{journal.name}.tmp-{os.getpid()}"))
    led = Ledger({}, BudgetConfig(), None, journal=str(journal))
    assert secret.read_text() == KEPT and os.stat(journal).st_nlink == 1
    del led


def test_a_sweeps_trial_lock_planted_as_a_hard_link_is_not_truncated(tmp_path, secret):
    from skillopt_ray.sweep.tune import _run_dir_lock

    run_dir = tmp_path / "sweep" / "trial-a"
    plant(secret, run_dir.parent / ".trial-a.sweep-lock")
    with _run_dir_lock(run_dir):
        pass
    assert secret.read_text() == KEPT
