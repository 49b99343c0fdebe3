"""Hostile files planted in a project's `.skillopt/` are per-item problems for the Nights tab and `sleep status`: a
receipt, adoption record or manifest that is unsealed, badly sealed, truncated, oversized, symlinked, a FIFO or not
JSON answers 200 with the night's state, the item marked `unreadable/forged: <why>` in one line, and writes nothing."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from dashboard_served import TOKEN, Served

from skillopt_ray.dashboard.security import Guard
from skillopt_ray.dashboard.server import Dashboard
from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.proposal import adopt, seal, staging
from skillopt_ray.sleep.proposal.staging_skills import stage_skills

STAMP = "20261128T041500Z"
NAMES = ("deploy", "review")


def _multi_night(tmp: Path) -> Path:
    """A night of two skills, `review` adopted (a sealed receipt 001); `deploy` pending."""
    project = tmp / "proj"
    skills = project / ".agents" / "skills"
    props = []
    for name in NAMES:
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(f"Run make {name}.\n")
        src = tmp / f"proposal-{name}"
        src.mkdir()
        (src / "SKILL.md").write_text(f"Run make test, then make {name}.\n")
        report = {"verified": True, "verdict": "accepted", "changed": True}
        props.append(staging.NightProposal(project, STAMP, name, src, skills / name, [skills], "# n\n", report))
    night = stage_skills(project, STAMP, props, "# night\n")
    assert sleep_cli.main(["adopt", "--project", str(project), "--skill", "review"]) == 0
    return night


def _claim(receipt: Path) -> bytes:
    return json.dumps({"op": "adopt", "stamp": STAMP, "skills": ["deploy"], "steps": [], "step_skills": []}).encode()


def unsealed(receipt: Path) -> None:
    receipt.write_bytes(_claim(receipt))


def bad_seal(receipt: Path) -> None:
    receipt.write_bytes(_claim(receipt))
    seal.seal_path(receipt).write_text("0" * 64 + "\n")


def truncated(receipt: Path) -> None:
    real = receipt.with_name("001-adopt.json")
    data = real.read_bytes()
    real.write_bytes(data[: len(data) // 2])  # the real receipt cut short: its seal no longer matches


def oversized(receipt: Path) -> None:
    receipt.write_bytes(b" " * (seal.MAX_SEALED_BYTES + 1))


def symlinked(receipt: Path) -> None:
    receipt.symlink_to(receipt.with_name("001-adopt.json"))  # a sealed receipt, under another name


def fifo(receipt: Path) -> None:
    os.mkfifo(receipt)


def not_json(receipt: Path) -> None:
    receipt.write_bytes(b'{"op": "adopt", "skills": ["deploy"')
    seal.seal_path(receipt).write_bytes(seal.seal_bytes(receipt, receipt.read_bytes()))  # even sealed here


def _snapshot(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p)] = p.read_bytes() if stat.S_ISREG(st.st_mode) else st.st_mode
    return out


def _served(project: Path) -> Served:
    (project.parent / "outputs").mkdir(exist_ok=True)
    return Served(Dashboard(project.parent / "outputs", project, guard=Guard.make(TOKEN, "127.0.0.1"), project=project))


@pytest.mark.parametrize("plant", [unsealed, bad_seal, truncated, oversized, symlinked, fifo, not_json])
def test_a_planted_receipt_is_one_forged_item_of_the_nights_state(tmp_path, capsys, plant: Callable[[Path], None]):
    night = _multi_night(tmp_path)
    project = night.parent.parent.parent
    plant(night / "receipts" / "002-adopt.json")
    before = _snapshot(project)
    with _served(project) as s:
        detail = httpx.get(s.base + "/api/night", params={"stamp": STAMP}, headers=s.auth(), timeout=20)
        listed = httpx.get(s.base + "/api/nights", headers=s.auth(), timeout=20)
    assert detail.status_code == 200, detail.text
    state = detail.json()["state"]
    assert "unreadable/forged: " in state and state.count("unreadable/forged: ") == 1, state
    assert "\n" not in state and len(detail.json()["diffs"]) == 2
    if plant is not truncated:  # the sealed receipts still tell each skill's state
        assert "adopted: review" in state and "pending: deploy" in state, state
    assert listed.status_code == 200
    rows = listed.json()["nights"]
    by_skill = {r["skill"]: r["state"] for r in rows if r["skill"]}
    assert set(by_skill) == set(NAMES)
    (problem,) = [r["state"] for r in rows if not r["skill"]]
    assert problem.startswith("unreadable/forged: ") and "\n" not in problem
    assert sleep_cli.main(["status", "--project", str(project)]) == 0
    out = capsys.readouterr().out
    assert f"{STAMP}  unreadable/forged: " in out
    assert _snapshot(project) == before  # reading wrote nothing
    live = {n: (project / ".agents/skills" / n / "SKILL.md").read_bytes() for n in NAMES}
    assert sleep_cli.main(["adopt", "--project", str(project), "--night", STAMP]) == 2  # never taken as a receipt
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: ")
    assert {n: (project / ".agents/skills" / n / "SKILL.md").read_bytes() for n in NAMES} == live


def _single(tmp: Path) -> Path:
    project = tmp / "single"
    (project / ".agents" / "skills" / "tidy").mkdir(parents=True)
    (project / ".agents" / "skills" / "tidy" / "SKILL.md").write_text("Keep headings.\n")
    src = tmp / "proposal"
    src.mkdir()
    (src / "SKILL.md").write_text("Keep headings.\n- and lists.\n")
    skills = project / ".agents" / "skills"
    report = {"verdict": "accepted", "scores": {"before": 0.5, "after": 0.8}}
    return staging.stage_night(
        staging.NightProposal(project, STAMP, "tidy", src, skills / "tidy", [skills], "# night\n", report)
    )


def test_a_planted_adopted_receipt_or_record_of_a_one_skill_night_is_marked_forged(tmp_path, capsys):
    night = _single(tmp_path)
    project = night.parent.parent.parent
    (night / adopt.ADOPTED).write_text(json.dumps({"stamp": STAMP, "steps": []}))  # says "adopted", sealed by no one
    wal = staging.staging_root(project) / adopt.WAL
    wal.write_text(json.dumps({"op": "adopt", "stamp": STAMP, "receipt": "x", "steps": []}))
    before = _snapshot(project)
    with _served(project) as s:
        detail = httpx.get(s.base + "/api/night", params={"stamp": STAMP}, headers=s.auth(), timeout=20)
        listed = httpx.get(s.base + "/api/nights", headers=s.auth(), timeout=20)
    assert detail.status_code == 200 and listed.status_code == 200
    assert detail.json()["state"].startswith("unreadable/forged: ") and "adopted.json" in detail.json()["state"]
    (row,) = listed.json()["nights"]
    assert row["state"] == detail.json()["state"] and row["skill"] == "tidy"
    assert listed.json()["interrupted_problem"].startswith("unreadable/forged: ")
    assert sleep_cli.main(["status", "--project", str(project)]) == 0
    out = capsys.readouterr().out
    assert "unreadable/forged" in out and "an adoption record that cannot be trusted" in out
    assert "rolls it back" not in out
    assert _snapshot(project) == before
