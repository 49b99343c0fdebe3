"""The dashboard's read-only Nights tab over real HTTP: a project's staged nights with their scores, intervals, verdicts
and adopted / pending state, a night's report and skill diff; behind the token and the Host/Origin checks; no way to
adopt from the page; a manifest cannot make it show another file; and a model-written report carrying `<script>` and
an `onerror` image stays text in a real browser."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from dashboard_browser import CHROMIUM, _dashboard_cmd, _wait_http
from dashboard_browser import TOKEN as CMD_TOKEN
from dashboard_served import TOKEN, Served, _free_port

from skillopt_ray.dashboard import nights
from skillopt_ray.dashboard.security import Guard
from skillopt_ray.dashboard.server import Dashboard
from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.proposal import seal, staging

HOSTILE = (
    "# Night report\n\n<script>window.__pwned=(window.__pwned||0)+1</script>\n"
    '<img src=x onerror="window.__pwned=(window.__pwned||0)+1">\nscore 0.5 -> 0.8\n'
)
OLD = "---\nname: tidy\ndescription: Tidy.\n---\n\nKeep headings.\n"
NEW = "---\nname: tidy\ndescription: Tidy.\n---\n\nKeep headings.\n- finish with DONE-OK.\n"


def stage(project: Path, stamp: str, report_md: str = HOSTILE, verdict: str = "accepted", text: str = NEW) -> Path:
    proposed = project / "proposals" / stamp
    proposed.mkdir(parents=True)
    (proposed / "SKILL.md").write_text(text)
    skills = project / ".agents" / "skills"
    report = {"verdict": verdict, "scores": {"before": 0.5, "after": 0.8}, "interval": {"mean_diff": 0.3, "lo": 0.1, "hi": 0.5}}  # fmt: skip
    return staging.stage_night(
        staging.NightProposal(project, stamp, "tidy", proposed, skills / "tidy", [skills], report_md, report)
    )


@pytest.fixture()
def project(tmp_path) -> Path:
    p = tmp_path / "proj"
    live = p / ".agents" / "skills" / "tidy" / "SKILL.md"
    live.parent.mkdir(parents=True)
    live.write_text(OLD)
    stage(p, "20261127T031500Z")
    assert sleep_cli.main(["adopt", "--project", str(p)]) == 0  # the first night adopted: the live skill is NEW
    stage(p, "20261128T031500Z", report_md="# second\nplain words\n", verdict="rejected", text=NEW + "- and more.\n")
    return p


def served(project: Path) -> Served:
    (project / "outputs").mkdir(exist_ok=True)
    return Served(Dashboard(project / "outputs", project, guard=Guard.make(TOKEN, "127.0.0.1"), project=project))


def test_the_nights_are_listed_with_scores_intervals_verdicts_and_state(project):
    with served(project) as s:
        r = httpx.get(s.base + "/api/nights", headers=s.auth())
        assert r.status_code == 200
        data = r.json()
        assert data["project"] == str(project.resolve())
        rows = {n["stamp"]: n for n in data["nights"]}
        assert list(rows) == ["20261127T031500Z", "20261128T031500Z"]
        first, second = rows.values()
        assert first["verdict"] == "accepted" and first["state"] == "adopted"
        assert second["verdict"] == "rejected" and second["state"] == "pending"
        assert first["summary"] == {"before": 0.5, "after": 0.8, "mean_diff": 0.3, "lo": 0.1, "hi": 0.5}

        night = httpx.get(s.base + "/api/night", params={"stamp": "20261127T031500Z"}, headers=s.auth()).json()
        assert night["report_md"] == HOSTILE  # as written: the page shows it as text
        (d,) = night["diffs"]
        assert d["rel"] == "skill/SKILL.md" and "+- finish with DONE-OK." in d["diff"]
        assert d["base"].endswith("backup/0")  # adopted: diffed against what adoption replaced
        pending = httpx.get(s.base + "/api/night", params={"stamp": "20261128T031500Z"}, headers=s.auth()).json()
        d = pending["diffs"][0]
        assert d["base"] == str(project / ".agents/skills/tidy/SKILL.md") and "+- and more." in d["diff"]
        assert "+- finish" not in d["diff"]  # against the live skill, which the first night's adoption wrote


def test_the_nights_api_is_read_only_and_behind_the_token_host_and_origin_checks(project):
    with served(project) as s:
        for path in ("/api/nights", "/api/night?stamp=20261127T031500Z"):
            assert httpx.get(s.base + path).status_code == 401
            assert httpx.get(s.base + path, headers={"Authorization": "Bearer nope"}).status_code == 401
            assert httpx.get(s.base + path, headers=s.auth(Host=f"evil.example:{s.port}")).status_code == 403
            cross = s.auth(**{"Sec-Fetch-Site": "cross-site"})
            assert httpx.get(s.base + path, headers=cross).status_code == 403
            assert httpx.post(s.base + path, json={}, headers=s.auth(Origin=s.base)).status_code == 405
        for stamp in ("", "../20261127T031500Z", "/etc", "20261127T031500Z/../..", "x" * 5000):
            r = httpx.get(s.base + "/api/night", params={"stamp": stamp}, headers=s.auth())
            assert r.status_code == 404, stamp[:40]
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    with served(project) as s:  # reading changes nothing on disk
        httpx.get(s.base + "/api/nights", headers=s.auth())
        httpx.get(s.base + "/api/night", params={"stamp": "20261128T031500Z"}, headers=s.auth())
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before


def test_a_manifest_cannot_make_the_page_show_another_file(project, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's private notes\n")
    night = staging.staging_root(project) / "20261128T031500Z"
    m = json.loads((night / "manifest.json").read_text())
    m["files"][0]["live_path"] = str(secret)  # pointed elsewhere, its pin no longer the file's
    m["files"][0]["rel"] = "../../../../secret.txt"
    (night / "manifest.json").write_text(json.dumps(m))
    edited = nights.night_detail(night)
    assert "does not match its seal" in edited["state"] and edited["diffs"] == []
    m["files"][0]["rel"] = "skill/SKILL.md"
    m["files"][0]["live_sha256"] = staging.sha256_bytes(secret.read_bytes())  # a file whose bytes one can know
    (night / "manifest.json").write_text(json.dumps(m))
    seal.seal_path(night / "manifest.json").write_bytes(seal.seal_bytes(night, (night / "manifest.json").read_bytes()))
    d = nights.night_detail(night)["diffs"][0]  # sealed here, yet its live path is outside every skill root
    assert "private notes" not in json.dumps(d) and d["base"].startswith("gone")


def test_the_project_defaults_to_the_one_whose_nights_folder_is_the_output_folder(project, tmp_path):
    assert nights.project_for(project / ".skillopt" / "nights", tmp_path) == project.resolve()
    assert nights.project_for(tmp_path / "outputs", project) == project.resolve()
    assert nights.project_for(tmp_path / "outputs", tmp_path) is None
    assert nights.night_rows(None)["nights"] == []


@pytest.mark.slow
def test_a_script_in_a_night_report_stays_text_in_a_real_browser(project, need_chromium):
    from playwright.sync_api import expect, sync_playwright

    port = _free_port()
    proc = subprocess.Popen(
        [*_dashboard_cmd(port, project / "outputs"), "--project", str(project)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/nights", token=CMD_TOKEN)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{port}/?token={CMD_TOKEN}")
            page.click("#tab-nights")
            expect(page.locator("#nights tbody")).to_contain_text("20261128T031500Z", timeout=30_000)
            expect(page.locator("#nights tbody")).to_contain_text("+0.300 [+0.100, +0.500]")
            expect(page.locator("#nights tbody")).to_contain_text("adopted")
            page.click("#nights tbody tr[data-stamp='20261127T031500Z']")
            expect(page.locator("#night-stamp")).to_contain_text("20261127T031500Z", timeout=30_000)
            expect(page.locator("#night-report")).to_contain_text("<script>window.__pwned", timeout=30_000)
            expect(page.locator("#night-diffs")).to_contain_text("+- finish with DONE-OK.")
            page.wait_for_timeout(2500)  # a poll or two redraws the tab
            assert page.evaluate("window.__pwned") is None
            assert page.locator("main script, main img").count() == 0
            # a night whose manifest was edited is its state: the tab shows that night and why, not the one before
            night = staging.staging_root(project) / "20261128T031500Z"
            (night / "manifest.json").write_text((night / "manifest.json").read_text().replace("tidy", "tidy2"))
            expect(page.locator("#nights tbody")).to_contain_text("unreadable/forged", timeout=30_000)
            page.click("#nights tbody tr[data-stamp='20261128T031500Z']")
            header = page.locator("#night-stamp")
            expect(header).to_contain_text("20261128T031500Z: unreadable/forged: ", timeout=30_000)
            expect(header).to_contain_text("does not match its seal")
            expect(page.locator("#night-report")).to_be_empty()
            expect(page.locator("#night-diffs")).to_be_empty()
            assert not errors, errors
            browser.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def _multi_live(project: Path, name: str) -> Path:
    return project / ".agents" / "skills" / name / "SKILL.md"


def _staged_two_skill_night(tmp_path):
    """A project whose night staged new versions of two live skills (deploy, review): (project, night folder)."""
    from skillopt_ray.sleep.proposal.staging_skills import stage_skills

    project = tmp_path / "multi"
    skills = project / ".agents" / "skills"
    props = []
    for name in ("deploy", "review"):
        _multi_live(project, name).parent.mkdir(parents=True)
        _multi_live(project, name).write_text(f"Run make {name}.\n")
        src = tmp_path / f"proposal-{name}"
        src.mkdir()
        (src / "SKILL.md").write_text(f"Run make test, then make {name}.\n")
        report = {"verified": True, "verdict": "accepted", "changed": True}
        props.append(staging.NightProposal(project, "20261128T041500Z", name, src, skills / name, [skills], "# n\n", report))  # fmt: skip
    return project, stage_skills(project, "20261128T041500Z", props, "# night\n")


def test_a_night_of_several_skills_diffs_each_against_its_backup_once_adopted(tmp_path):
    """Each adoption of a several-skill night keeps its backups under backup/<receipt>/<i>: the tab finds them, so an
    adopted skill shows what it replaced (not "gone"), a pending one the live file, an undone one the restored file."""
    project, night = _staged_two_skill_night(tmp_path)

    def diffs() -> dict[str, dict]:
        return {d["rel"].split("/")[1]: d for d in nights.night_detail(night)["diffs"]}

    def replaced(d: dict, name: str) -> bool:
        return f"-Run make {name}." in d["diff"] and f"+Run make test, then make {name}." in d["diff"]

    assert sleep_cli.main(["adopt", "--project", str(project), "--skill", "review"]) == 0  # receipt 001: review
    d = diffs()
    assert replaced(d["review"], "review") and d["review"]["base"].endswith("backup/001-adopt/0"), d["review"]
    assert replaced(d["deploy"], "deploy") and d["deploy"]["base"] == str(_multi_live(project, "deploy"))
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 0  # receipt 002: deploy, its backup at index 0
    d = diffs()
    assert replaced(d["review"], "review") and d["review"]["base"].endswith("backup/001-adopt/0")
    assert replaced(d["deploy"], "deploy") and d["deploy"]["base"].endswith("backup/002-adopt/0"), d["deploy"]
    assert sleep_cli.main(["adopt", "--project", str(project), "--undo", "--skill", "review"]) == 0
    d = diffs()  # undone: the live file is again what staging saw
    assert replaced(d["review"], "review") and d["review"]["base"] == str(_multi_live(project, "review"))
    assert replaced(d["deploy"], "deploy") and "backup/002-adopt/0" in d["deploy"]["base"]


def test_a_one_skill_night_undone_diffs_against_the_restored_live_file(project):
    night = staging.staging_root(project) / "20261127T031500Z"
    assert sleep_cli.main(["adopt", "--project", str(project), "--undo", "--night", night.name]) == 0
    (d,) = nights.night_detail(night)["diffs"]
    assert d["base"] == str(project / ".agents/skills/tidy/SKILL.md") and "+- finish with DONE-OK." in d["diff"]


def test_a_several_skill_nights_backup_is_found_when_its_receipt_cannot_be_read(tmp_path):
    """The receipt that names a backup is truncated (its seal no longer matches): the backup on disk still holds the
    pinned bytes, so the adopted skill diffs against it, not "gone"; a planted file under backup/ is never shown."""
    project, night = _staged_two_skill_night(tmp_path)
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 0  # receipt 001: both, backups 0 and 1
    receipt = night / "receipts" / "001-adopt.json"
    receipt.write_bytes(receipt.read_bytes()[:40])
    (night / "backup" / "009-adopt").mkdir()
    (night / "backup" / "009-adopt" / "0").write_text("planted text\n")
    by = {d["rel"].split("/")[1]: d for d in nights.night_detail(night)["diffs"]}
    for name in ("deploy", "review"):
        assert f"-Run make {name}." in by[name]["diff"], by[name]
        assert "/backup/001-adopt/" in by[name]["base"] and "planted" not in by[name]["diff"]
