"""Staging a night and adopting it as a transaction: every refusal leaves the live skill byte-identical."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sleep_fixtures import LIVE, NEW, live_bytes, propose, refused

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.proposal import adopt, staging
from skillopt_ray.sleep.proposal.lock import Busy, adopt_lock, night_lock
from skillopt_ray.sleep.proposal.staging import stage_night


def test_stage_writes_pins_and_manifest_last(tmp_path, proj, monkeypatch):
    monkeypatch.setenv("MY_API_TOKEN", "s3cr3t-value-123456")
    ev = tmp_path / "ev"
    ev.mkdir()
    (ev / "calls.jsonl").write_text('{"prompt": "use s3cr3t-value-123456 please"}\n')
    night = stage_night(propose(tmp_path, proj, "20261128T041500Z", evidence_dir=ev))
    m = json.loads((night / "manifest.json").read_text())
    rows = {r["rel"]: r for r in m["files"]}
    assert rows["skill/SKILL.md"]["live_sha256"] == staging.sha256_bytes(LIVE.encode())
    assert rows["skill/notes.md"]["live_sha256"] == "absent"
    assert rows["skill/SKILL.md"]["sha256"] == staging.sha256_bytes(NEW.encode())
    assert m["skill_roots"] == [os.path.realpath(proj / ".agents" / "skills")]
    assert "s3cr3t" not in (night / "evidence" / "calls.jsonl").read_text()
    assert (night / "report.md").exists() and (night / "skill" / "SKILL.md").read_text() == NEW
    with pytest.raises(ValueError, match="already staged"):
        stage_night(propose(tmp_path, proj, "20261128T041500Z"))


def test_unfinished_night_without_manifest_is_ignored(tmp_path, proj, capsys):
    (staging.staging_root(proj) / "20261128T010000Z").mkdir(parents=True)
    assert main(["status", "--project", str(proj)]) == 0
    assert "no staged nights" in capsys.readouterr().out
    refused(proj, capsys=capsys)


def test_adopt_then_undo_round_trip_and_status(tmp_path, proj, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    assert main(["status", "--project", str(proj), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["pending"] == ["20261128T041500Z"] and st["nights"][0]["summary"]["mean_diff"] == 0.25
    assert main(["adopt", "--project", str(proj)]) == 0
    assert live_bytes(proj) == {"SKILL.md": NEW.encode(), "notes.md": b"more\n"}
    capsys.readouterr()
    assert main(["status", "--project", str(proj)]) == 0
    out = capsys.readouterr().out
    assert "adopted" in out and "pending:" not in out and "+0.250 [+0.050, +0.450]" in out
    err = refused(proj, "--night", "20261128T041500Z", capsys=capsys)
    assert "already adopted" in err
    assert main(["adopt", "--project", str(proj), "--undo"]) == 0
    assert live_bytes(proj) == {"SKILL.md": LIVE.encode()}
    assert "already undone" in refused(proj, "--undo", "--night", "20261128T041500Z", capsys=capsys)
    assert main(["status", "--project", str(proj)]) == 0
    assert "undone" in capsys.readouterr().out


def test_pin_mismatch_refused(tmp_path, proj, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    (proj / ".agents" / "skills" / "deploy" / "SKILL.md").write_text(LIVE + "hand edit\n")
    assert "changed since night 20261128T041500Z was staged" in refused(proj, capsys=capsys)


def test_tampered_proposal_refused(tmp_path, proj, capsys):
    night = stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    (night / "skill" / "SKILL.md").write_text("rm -rf /\n")
    assert "changed since staging" in refused(proj, capsys=capsys)


def test_symlink_escape_refused_at_adopt(tmp_path, proj, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "SKILL.md").write_text(LIVE)
    live = proj / ".agents" / "skills" / "deploy"
    (live / "SKILL.md").unlink()
    live.rmdir()
    live.symlink_to(outside)
    assert "outside the skill root" in refused(proj, capsys=capsys)
    assert (outside / "SKILL.md").read_text() == LIVE and not (outside / "notes.md").exists()


def test_dotdot_and_escaping_root_refused_at_staging_and_in_edited_manifest(tmp_path, proj, capsys):
    p = propose(tmp_path, proj, "20261128T041500Z")
    p.live_skill_dir = proj / ".agents" / "skills" / ".." / ".." / "deploy"
    with pytest.raises(ValueError, match=r"'\.\.'"):
        stage_night(p)
    night = stage_night(propose(tmp_path, proj, "20261128T041600Z"))
    m = json.loads((night / "manifest.json").read_text())
    m["files"][0]["live_path"] = str(proj / ".agents" / "skills" / ".." / "evil.md")
    (night / "manifest.json").write_text(json.dumps(m))
    assert "does not match its seal" in refused(proj, capsys=capsys)
    reseal(night / "manifest.json")  # even a manifest this machine sealed may not name a path with '..'
    assert "'..'" in refused(proj, capsys=capsys)


def reseal(path: Path) -> None:
    """Seal a file as staging would (what only this machine's key can do)."""
    from skillopt_ray.sleep.proposal import seal

    seal.seal_path(path).write_bytes(seal.seal_bytes(path, path.read_bytes()))


def test_unverified_needs_flag_and_auto_adopt_never(tmp_path, proj, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z", verified=False))
    with pytest.raises(adopt.Refused, match="auto-adopt never"):
        adopt.auto_adopt(proj, "20261128T041500Z")
    assert "unverified" in refused(proj, capsys=capsys)
    assert main(["adopt", "--project", str(proj), "--allow-unverified"]) == 0
    assert live_bytes(proj)["SKILL.md"] == NEW.encode()


def test_auto_adopt_installs_a_verified_night(tmp_path, proj):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    assert "adopted" in adopt.auto_adopt(proj, "20261128T041500Z")
    assert live_bytes(proj)["SKILL.md"] == NEW.encode()


def test_concurrent_adopt_refused(tmp_path, proj, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    with adopt_lock(proj):
        assert "another adopt is already running" in refused(proj, capsys=capsys)
    assert main(["adopt", "--project", str(proj)]) == 0


def test_second_night_for_the_project_is_busy(proj):
    with night_lock(proj):
        with pytest.raises(Busy, match=f"another night is already running.*pid {os.getpid()}"):
            with night_lock(proj):
                pass
    with night_lock(proj):  # released
        pass


def test_undo_refused_when_live_changed_since_adoption(tmp_path, proj, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    assert main(["adopt", "--project", str(proj)]) == 0
    (proj / ".agents" / "skills" / "deploy" / "SKILL.md").write_text("edited after adoption\n")
    assert "changed since night 20261128T041500Z was adopted" in refused(proj, "--undo", capsys=capsys)


def test_second_night_pinned_to_first_is_refused_after_first_adopted(tmp_path, proj, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    stage_night(propose(tmp_path, proj, "20261129T041500Z", text=NEW + "again\n"))
    assert main(["adopt", "--project", str(proj), "--night", "20261128T041500Z"]) == 0
    assert "changed since night 20261129T041500Z was staged" in refused(proj, capsys=capsys)


class Killed(BaseException):
    """Stands for a kill: nothing in the product catches it."""


def test_interrupted_adopt_rolls_back_on_next_command(tmp_path, proj, monkeypatch, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    real_put, calls = adopt.put, []

    def put_then_die(project, live, copy):
        calls.append(live)
        real_put(project, live, copy)
        raise Killed  # the first file written, the second not, no receipt

    monkeypatch.setattr(adopt, "put", put_then_die)
    with pytest.raises(Killed):
        adopt.adopt(proj)
    assert len(calls) == 1 and adopt.wal_path(proj).exists()
    monkeypatch.setattr(adopt, "put", real_put)
    assert main(["status", "--project", str(proj)]) == 0
    assert "interrupted" in capsys.readouterr().out
    assert main(["adopt", "--project", str(proj)]) == 0
    out = capsys.readouterr().out
    assert "rolled back" in out and "adopted night" in out
    assert live_bytes(proj) == {"SKILL.md": NEW.encode(), "notes.md": b"more\n"}
    assert not adopt.wal_path(proj).exists()


def test_interrupted_adopt_refuses_when_file_changed_meanwhile(tmp_path, proj, monkeypatch, capsys):
    stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    monkeypatch.setattr(adopt, "put", lambda project, live, copy: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        adopt.adopt(proj)
    monkeypatch.undo()
    (proj / ".agents" / "skills" / "deploy" / "SKILL.md").write_text("someone else\n")
    assert "changed by something else" in refused(proj, capsys=capsys)
    assert adopt.wal_path(proj).exists()


KILLER = """
import os, signal, sys
from pathlib import Path
from skillopt_ray.sleep.proposal import adopt, staging
real = staging.write_atomic
def write_then_kill(path, data, mode=0o644):
    if Path(path).name == "SKILL.md" and ".agents" in str(path):
        os.kill(os.getpid(), signal.SIGKILL)  # between the backup and the write of the live file
    real(path, data, mode)
adopt.write_atomic = write_then_kill
adopt.adopt(Path(sys.argv[1]))
"""


def test_sigkill_between_backup_and_write_never_half_writes(tmp_path, proj, capsys):
    night = stage_night(propose(tmp_path, proj, "20261128T041500Z"))
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLER), str(proj)], capture_output=True, check=False)
    assert p.returncode == -signal.SIGKILL
    assert (night / "backup" / "0").read_text() == LIVE and adopt.wal_path(proj).exists()
    assert live_bytes(proj) == {"SKILL.md": LIVE.encode()}
    assert main(["adopt", "--project", str(proj)]) == 0  # the lock died with the process; rollback, then adopt
    assert live_bytes(proj) == {"SKILL.md": NEW.encode(), "notes.md": b"more\n"}


def test_memory_file_only_at_project_top(tmp_path, proj, capsys):
    (proj / "AGENTS.md").write_text("# agents\n")
    memory = ("# agents\n<!-- skillopt -->x<!-- /skillopt -->\n", proj / "AGENTS.md")
    stage_night(propose(tmp_path, proj, "20261128T041500Z", memory=memory))
    assert main(["adopt", "--project", str(proj)]) == 0
    assert "skillopt" in (proj / "AGENTS.md").read_text()
    assert main(["adopt", "--project", str(proj), "--undo"]) == 0
    assert (proj / "AGENTS.md").read_text() == "# agents\n"
    bad = propose(tmp_path, proj, "20261129T041500Z", memory=("x", proj / "docs" / "AGENTS.md"))
    with pytest.raises(ValueError, match="project's top"):
        stage_night(bad)


def test_adopt_keeps_an_executable_mode_and_night_folder_is_private(tmp_path, proj):
    script = proj / ".agents" / "skills" / "deploy" / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o755)
    p = propose(tmp_path, proj, "20261128T041500Z")
    (p.proposed_skill_dir / "run.sh").write_text("echo new\n")
    night = stage_night(p)
    assert night.stat().st_mode & 0o777 == 0o700
    adopt.adopt(proj)
    assert script.read_text() == "echo new\n" and script.stat().st_mode & 0o777 == 0o755


def test_report_without_a_gate_verdict_is_refused_and_verdict_alone_decides(tmp_path, proj):
    p = propose(tmp_path, proj, "20261128T041500Z")
    p.report = {"scores": {}}
    with pytest.raises(ValueError, match="lacks `verified`"):
        stage_night(p)
    p.stamp, p.report = "20261128T041501Z", {"verdict": "unverified"}
    assert json.loads((stage_night(p) / "manifest.json").read_text())["verified"] is False
    p.stamp, p.report = "20261128T041502Z", {"verdict": "accepted", "gates": [{"mean_diff": 0.1, "lo": 0.0, "hi": 0.2}]}
    m = json.loads((stage_night(p) / "manifest.json").read_text())
    assert m["verified"] is True and m["summary"] == {"mean_diff": 0.1, "lo": 0.0, "hi": 0.2}
