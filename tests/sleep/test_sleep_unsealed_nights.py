"""A night staged before adoption seals existed (no seal beside its manifest, a stamp older than this machine's
staging key) is named for what it is by `status` and the Nights tab, and `adopt` refuses it in one line with the fix,
exit 2, writing nothing. A forged manifest gets the same refusal whether or not it passes itself off as old."""

from __future__ import annotations

import datetime as dt
import json
import stat
from pathlib import Path

import pytest
from sleep_fixtures import LIVE, live_bytes, propose

from skillopt_ray.dashboard import nights
from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.proposal import seal, staging

OLD = "20261128T041500Z"  # before the staging key each test makes
OLD_SAYS = f"night {OLD} was staged before adoption seals; cannot be adopted: run the night again"


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    """A staging key of this test's own, made now (so its age is known)."""
    monkeypatch.setenv("SKILLOPT_STATE_DIR", str(tmp_path / "state"))


def _snapshot(root: Path) -> dict[str, object]:
    return {str(p): p.read_bytes() if stat.S_ISREG(p.lstat().st_mode) else None for p in sorted(root.rglob("*"))}


def _unseal(night: Path) -> Path:
    seal.seal_path(night / "manifest.json").unlink()
    return night


def _adopt_refused(project: Path, stamp: str, capsys) -> str:
    before = _snapshot(project)
    assert main(["adopt", "--project", str(project), "--night", stamp]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: ")
    assert _snapshot(project) == before  # not even the adoption lock's file
    return err


def test_an_old_unsealed_night_says_so_and_adopt_refuses_with_the_fix(tmp_path, proj, capsys):
    _unseal(staging.stage_night(propose(tmp_path, proj, OLD)))
    assert main(["status", "--project", str(proj)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{OLD}  {OLD_SAYS}"
    assert main(["status", "--project", str(proj), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["nights"]
    assert row["state"] == OLD_SAYS
    assert nights.night_rows(proj)["nights"][0]["state"] == OLD_SAYS
    assert nights.night_detail(staging.staging_root(proj) / OLD)["state"] == OLD_SAYS
    assert _adopt_refused(proj, OLD, capsys) == f"error: {OLD_SAYS}"
    assert main(["adopt", "--project", str(proj)]) == 2  # the newest pending night, found without --night
    assert capsys.readouterr().err.strip() == f"error: {OLD_SAYS}"
    assert live_bytes(proj) == {"SKILL.md": LIVE.encode()}


def test_a_forged_manifest_is_refused_alike_whether_or_not_it_looks_old(tmp_path, proj, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "SKILL.md"
    staging.stage_night(propose(tmp_path, proj, "20261101T000000Z"))  # the key is made now
    recent = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).strftime("%Y%m%dT%H%M%SZ")
    for stamp in (OLD, recent):
        night = staging.staging_root(proj) / stamp
        (night / "skill").mkdir(parents=True)
        (night / "skill" / "SKILL.md").write_text("planted\n")
        row = {"kind": "skill", "rel": "skill/SKILL.md", "sha256": staging.sha256_bytes(b"planted\n"),
               "live_path": str(target), "live_realpath": str(target), "live_sha256": staging.ABSENT,
               "root": str(outside)}  # fmt: skip
        m = {"schema": staging.SCHEMA, "version": staging.VERSION, "stamp": stamp, "project": str(proj.resolve()),
             "skill_name": "deploy", "live_skill_dir": str(outside), "skill_roots": [str(outside)], "verified": True,
             "verdict": "accepted", "changed": True, "summary": {}, "evidence_files": 0, "files": [row]}  # fmt: skip
        (night / "manifest.json").write_text(json.dumps(m))
    assert _adopt_refused(proj, OLD, capsys) == f"error: {OLD_SAYS}"  # passed off as old: the same refusal
    err = _adopt_refused(proj, recent, capsys)  # staged after the key was made, yet unsealed: forged or copied
    assert "no seal of this machine's" in err and "before adoption seals" not in err
    assert main(["status", "--project", str(proj)]) == 0
    out = capsys.readouterr().out
    assert f"{recent}  unreadable/forged: " in out and f"{OLD}  {OLD_SAYS}" in out
    assert not target.exists()


def test_an_unsealed_manifest_of_another_project_or_a_bad_seal_is_not_called_old(tmp_path, proj, capsys):
    night = staging.stage_night(propose(tmp_path, proj, OLD))
    m = json.loads((night / "manifest.json").read_text())
    (night / "manifest.json").write_text(json.dumps({**m, "project": str(tmp_path / "elsewhere")}))
    assert "no seal" not in _adopt_refused(proj, OLD, capsys)  # its seal is there, and no longer matches
    _unseal(night)
    err = _adopt_refused(proj, OLD, capsys)  # copied from another project
    assert "no seal of this machine's" in err and "before adoption seals" not in err
