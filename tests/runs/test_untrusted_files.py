"""Files someone else planted in a run folder, a staged night or a task folder, read by the dashboard, `report`,
`compare` and `sleep status/adopt`: symlinks (to /proc/self/environ, /etc/passwd, a key file), FIFOs, huge files,
malformed manifests, forged transaction records, folders of 20,000 folders, and `review.json` with a typo. None of
them shows another file, blocks a reader, costs more than its cap, or takes a whole list down."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import httpx
import pytest
from dashboard_served import TOKEN, Served

from skillopt_ray.base import untrusted
from skillopt_ray.cli import review_gate
from skillopt_ray.dashboard import nights, views
from skillopt_ray.dashboard.security import Guard
from skillopt_ray.dashboard.server import Dashboard
from skillopt_ray.runs.rundir import RunDir
from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.proposal import adopt, seal, staging

SECRET = "OPENAI_API_KEY=sk-planted-secret-0123456789"


@pytest.fixture()
def secret(tmp_path) -> Path:
    """A file outside every run folder standing for /proc/self/environ, /etc/passwd or a key file."""
    f = tmp_path / "outside" / "environ"
    f.parent.mkdir()
    f.write_text(SECRET + "\n")
    return f


def make_run(outputs: Path, name: str) -> Path:
    run = outputs / "runs" / name
    for sub in ("skills", "steps/e01_s001"):
        (run / sub).mkdir(parents=True)
    (run / "config.yaml").write_text("experiment: searchqa\nseed: 1\n")
    (run / "identity.json").write_text("{}")
    (run / "state.json").write_text(json.dumps({"current_version": 1, "global_step": 1}))
    (run / "skills" / "skill_v0001.md").write_text("# the run's own skill\n")
    (run / "steps" / "e01_s001" / "diff.md").write_text("```diff\n+own line\n```\n")
    return run


def dash(root: Path) -> Dashboard:
    (root / "outputs").mkdir(exist_ok=True)
    return Dashboard(root / "outputs", root, guard=Guard.make(TOKEN, "127.0.0.1"), project=root)


def get(s: Served, path: str, **params: str) -> httpx.Response:
    return httpx.get(s.base + path, params=params, headers=s.auth(), timeout=20)


def test_symlinks_planted_in_a_run_folder_show_nothing_outside_it(tmp_path, secret):
    d = dash(tmp_path)
    a, b = make_run(d.outputs, "a"), make_run(d.outputs, "b")
    (a / "skills" / "skill_v0001.md").unlink()
    (a / "skills" / "skill_v0001.md").symlink_to(secret)  # Watch's current skill
    (a / "steps" / "e01_s001" / "diff.md").unlink()
    (a / "steps" / "e01_s001" / "diff.md").symlink_to(secret)  # a step diff
    (a / "best_skill.md").symlink_to(secret)  # Compare's skill diff
    (b / "steps").rename(tmp_path / "outside" / "steps")
    (b / "steps").symlink_to(tmp_path / "outside" / "steps")  # a symlinked folder, the file in it plain
    (tmp_path / "outside" / "steps" / "e01_s001" / "diff.md").write_text(SECRET)
    with Served(d) as s:
        answers = [
            get(s, "/api/run", id="runs/a"),
            get(s, "/api/diff", id="runs/a", step="e01_s001"),
            get(s, "/api/run", id="runs/b"),
            get(s, "/api/diff", id="runs/b", step="e01_s001"),
            get(s, "/api/skill_diff", a="runs/a", b="runs/b"),
            get(s, "/api/runs"),
        ]
    for r in answers:
        assert r.status_code in (200, 404), r.text
        assert "sk-planted-secret" not in r.text, r.request.url
    assert "own skill" in answers[2].text  # the plain files of a run are still shown


def test_a_hard_link_planted_in_a_run_folder_shows_nothing_outside_it(tmp_path, secret):
    """A second name of a file elsewhere (a hard link, which no symlink check sees) is refused in one line."""
    d = dash(tmp_path)
    run = make_run(d.outputs, "a")
    (run / "skills" / "skill_v0001.md").unlink()
    os.link(secret, run / "skills" / "skill_v0001.md")
    os.link(secret, run / "best_skill.md")
    with pytest.raises(untrusted.Untrusted, match="hard link"):
        untrusted.read_bytes(run, "best_skill.md")
    with Served(d) as s:
        answers = [get(s, "/api/run", id="runs/a"), get(s, "/api/skill_diff", a="runs/a", b="runs/a")]
    for r in answers:
        assert r.status_code in (200, 404), r.text
        assert "sk-planted-secret" not in r.text, r.request.url
    assert views.best_skill(run) == ""


def test_a_fifo_or_a_device_in_a_run_folder_never_blocks_a_reader(tmp_path):
    d = dash(tmp_path)
    run = make_run(d.outputs, "a")
    (run / "skills" / "skill_v0001.md").unlink()
    os.mkfifo(run / "skills" / "skill_v0001.md")
    os.mkfifo(run / "summary.json")
    (run / "best_skill.md").symlink_to("/dev/zero")
    done: list[object] = []
    t = threading.Thread(target=lambda: done.append(views.run_detail(d.outputs, run)), daemon=True)
    t.start()
    t.join(timeout=20)
    assert done, "reading a run folder with a FIFO in it blocked"
    with pytest.raises(untrusted.Untrusted, match="not a regular file"):
        untrusted.read_bytes(run, "summary.json")
    assert views.best_skill(run) == ""  # /dev/zero through a symlink: refused, not read to 1.68 GB


def test_a_file_over_its_cap_is_refused_before_it_is_read(tmp_path):
    d = dash(tmp_path)
    run = make_run(d.outputs, "a")
    with open(run / "history.jsonl", "wb") as f:
        f.truncate(80 << 20)  # 80 MB (sparse: costs no disk)
    with pytest.raises(untrusted.Untrusted, match="over the"):
        untrusted.read_bytes(run, "history.jsonl")
    assert RunDir(run).history() == []
    rows = views.compare_rows(d.outputs, [run])
    assert rows[0]["id"] == "runs/a"


def test_one_damaged_run_is_a_row_with_its_error_never_a_500(tmp_path):
    d = dash(tmp_path)
    make_run(d.outputs, "good")
    bad = make_run(d.outputs, "bad")
    (bad / "summary.json").write_bytes(b"\xff\xfe not utf-8")
    with Served(d) as s:
        r = get(s, "/api/runs")
    assert r.status_code == 200, r.text
    rows = {row["id"]: row for row in r.json()["runs"]}
    assert rows["runs/good"]["error"] == "" and rows["runs/good"]["status"] != "unreadable"
    assert rows["runs/bad"]["status"] == "unreadable" and "UTF-8" in rows["runs/bad"]["error"]


def test_a_poll_of_unchanged_runs_reads_them_once(tmp_path, monkeypatch):
    d = dash(tmp_path)
    run = make_run(d.outputs, "a")
    calls: list[Path] = []
    real = views.safe_row
    monkeypatch.setattr(views, "safe_row", lambda root, path, *a: calls.append(path) or real(root, path, *a))
    d.runs()
    d.runs()
    assert calls == [run]
    (run / "state.json").write_text(json.dumps({"current_version": 1, "global_step": 2}))
    os.utime(run / "state.json", ns=(1, 1))  # a new stamp, whatever the clock's resolution
    d.runs()
    assert calls == [run, run]


def test_walking_the_output_folder_is_bounded(tmp_path):
    root = tmp_path / "many"
    for i in range(300):
        (root / "aaa" / f"d{i:04d}").mkdir(parents=True)
    make_run(root, "late")
    walk = untrusted.find_dirs(root, views.is_run_dir, views.MAX_DEPTH, entries=100)
    assert re.match(r"stopped looking after 10\d entries", walk.stopped), walk.stopped
    full = untrusted.find_dirs(root, views.is_run_dir, views.MAX_DEPTH)
    assert full.stopped == "" and full.found == [root / "runs" / "late"]
    # breadth first: a run two levels down is found before the walk spends its budget inside a huge folder
    shallow = untrusted.find_dirs(root, views.is_run_dir, views.MAX_DEPTH, entries=400)
    assert shallow.found == [root / "runs" / "late"] and shallow.stopped


def test_paths_in_records_are_relative_and_plain():
    for bad in ("/etc/passwd", "../x", "a/../../b", "", "a\x00b"):
        with pytest.raises(untrusted.Untrusted):
            untrusted.parts_of(bad)
    assert untrusted.parts_of("skill/./SKILL.md") == ("skill", "SKILL.md")


# ---------------------------------------------------------------- staged nights


OLD = "---\nname: tidy\ndescription: Tidy.\n---\n\nKeep headings.\n"


def stage(project: Path, stamp: str = "20261128T031500Z") -> Path:
    proposed = project / "proposals" / stamp
    proposed.mkdir(parents=True)
    (proposed / "SKILL.md").write_text(OLD + "- more\n")
    skills = project / ".agents" / "skills"
    report = {"verdict": "accepted", "scores": {"before": 0.5, "after": 0.8}}
    return staging.stage_night(
        staging.NightProposal(project, stamp, "tidy", proposed, skills / "tidy", [skills], "# night\n", report)
    )


@pytest.fixture()
def project(tmp_path) -> Path:
    p = tmp_path / "proj"
    live = p / ".agents" / "skills" / "tidy" / "SKILL.md"
    live.parent.mkdir(parents=True)
    live.write_text(OLD)
    return p


def reseal(path: Path) -> None:
    seal.seal_path(path).write_bytes(seal.seal_bytes(path, path.read_bytes()))


def planted_night(project: Path, secret: Path, stamp: str = "20261129T031500Z") -> Path:
    """A night folder a cloned repository ships: its manifest names a file outside through an absolute path."""
    night = staging.staging_root(project) / stamp
    (night / "skill").mkdir(parents=True)
    sha = staging.sha256_bytes(secret.read_bytes())
    row = {"kind": "skill", "rel": str(secret), "sha256": sha, "live_path": str(secret), "live_realpath": str(secret),
           "live_sha256": sha, "root": str(secret.parent)}  # fmt: skip
    m = {"schema": staging.SCHEMA, "version": staging.VERSION, "stamp": stamp, "project": str(project.resolve()),
         "skill_name": "tidy", "live_skill_dir": str(secret.parent), "skill_roots": [str(secret.parent)],
         "verified": True, "verdict": "accepted", "changed": True, "summary": {}, "evidence_files": 0, "files": [row]}  # fmt: skip
    (night / "manifest.json").write_text(json.dumps(m))
    return night


def test_a_planted_night_shows_nothing_outside_and_adopt_refuses_in_one_line(project, secret, tmp_path, capsys):
    stage(project)
    planted_night(project, secret)
    d = dash(project)
    with Served(d) as s:
        listed = get(s, "/api/nights")
        detail = get(s, "/api/night", stamp="20261129T031500Z")
    assert listed.status_code == 200
    rows = {r["stamp"]: r for r in listed.json()["nights"]}
    assert rows["20261128T031500Z"]["state"] == "pending"
    assert rows["20261129T031500Z"]["state"].startswith("unreadable/forged: ")
    assert "no seal of this machine's" in rows["20261129T031500Z"]["state"]
    assert detail.status_code == 200 and "sk-planted-secret" not in detail.text  # the night's state says why
    assert detail.json()["state"] == rows["20261129T031500Z"]["state"] and detail.json()["diffs"] == []
    before = secret.read_bytes()
    assert sleep_cli.main(["adopt", "--project", str(project), "--night", "20261129T031500Z"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no seal" in err and secret.read_bytes() == before


def test_a_sealed_manifest_still_shows_nothing_through_a_symlinked_folder(project, secret):
    night = stage(project)
    (night / "skill" / "SKILL.md").unlink()
    (night / "skill").rmdir()
    (night / "skill").symlink_to(secret.parent)
    os.rename(secret, secret.parent / "SKILL.md")
    detail = nights.night_detail(night)
    assert "sk-planted-secret" not in json.dumps(detail)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(files="not a list"),
        lambda m: m.update(files=["a row that is a string"]),
        lambda m: m.update(summary={"before": "0.5", "after": [1]}),
        lambda m: m.pop("stamp"),
        lambda m: m["files"][0].pop("live_sha256"),
        lambda m: m["files"][0].update(rel="/proc/self/environ"),
    ],
)
def test_a_malformed_manifest_is_one_unreadable_row(project, capsys, edit):
    stage(project, "20261127T031500Z")
    night = stage(project)
    m = json.loads((night / "manifest.json").read_text())
    edit(m)
    (night / "manifest.json").write_text(json.dumps(m))
    reseal(night / "manifest.json")  # sealed, as a bug of this machine's own could leave it
    rows = nights.night_rows(project)["nights"]
    assert [r["stamp"] for r in rows] == ["20261127T031500Z", "20261128T031500Z"]
    assert rows[1]["state"].startswith("unreadable/forged: ")
    assert sleep_cli.main(["status", "--project", str(project)]) == 0
    assert "unreadable/forged" in capsys.readouterr().out
    detail = nights.night_detail(night)
    assert detail["state"] == rows[1]["state"] and detail["diffs"] == [] and detail["report_md"] == ""


def test_a_copied_night_with_an_edited_manifest_writes_nothing(project, tmp_path, capsys):
    night = stage(project)
    m = json.loads((night / "manifest.json").read_text())
    outside = tmp_path / "outside-root"
    outside.mkdir()
    m["skill_roots"], m["files"][0]["root"] = [str(outside)], str(outside)
    m["files"][0]["live_path"] = m["files"][0]["live_realpath"] = str(outside / "SKILL.md")
    m["files"][0]["live_sha256"] = staging.ABSENT
    (night / "manifest.json").write_text(json.dumps(m))
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "does not match its seal" in err
    assert not (outside / "SKILL.md").exists()


def test_a_forged_transaction_record_makes_adopt_write_nothing(project, tmp_path, capsys):
    stage(project)
    target = tmp_path / "written-by-a-forged-record"
    copy = tmp_path / "payload"
    copy.write_text("planted\n")
    wal = {"op": "adopt", "stamp": "x", "receipt": str(tmp_path / "nope"),
           "steps": [{"live": str(target), "before": "0" * 64, "before_copy": str(copy), "after": "absent",
                      "after_copy": None}]}  # fmt: skip
    staging.staging_root(project).joinpath(adopt.WAL).write_text(json.dumps(wal))
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no seal" in err and adopt.WAL in err
    assert not target.exists()
    reseal(staging.staging_root(project) / adopt.WAL)  # even sealed, a copy from outside the staging folder is refused
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 2
    assert "is not under" in capsys.readouterr().err and not target.exists()


# ---------------------------------------------------------------- the review gate


@pytest.mark.parametrize("text", ['{"reviewed": flase}', '{"reviewed": "false"}', '{"reviewed": 1}', "[]", "{}"])
def test_review_json_that_is_not_a_boolean_is_an_error(tmp_path, text):
    (tmp_path / "review.json").write_text(text)
    remote = [review_gate.Endpoint("openai", "https://api.openai.com/v1")]
    with pytest.raises(review_gate.ReviewRefused, match="review.json"):
        review_gate.require_reviewed(tmp_path, remote, False)
    (tmp_path / "review.json").write_text('{"reviewed": true}')
    review_gate.require_reviewed(tmp_path, remote, False)


def test_a_copied_sweep_folder_names_no_tracking_server_and_no_file_elsewhere(tmp_path, secret, monkeypatch):
    from skillopt_ray.compare.records import read_sweep_meta

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    meta = {"trials": [], "parent_run_id": "p", "tracking_uri": "HTTP://127.0.0.1:28999"}
    (sweep / "sweep.json").write_text(json.dumps(meta))
    assert read_sweep_meta(sweep)["tracking_uri"] is None  # the MLflow token is not sent where a folder says
    meta["tracking_uri"] = "http://127.0.0.1:5000/"
    (sweep / "sweep.json").write_text(json.dumps(meta))
    assert read_sweep_meta(sweep)["tracking_uri"] == "http://127.0.0.1:5000/"
    (sweep / "sweep.json").unlink()
    (sweep / "sweep.json").symlink_to(secret)
    with pytest.raises(ValueError, match="symlink"):
        read_sweep_meta(sweep)


def test_a_fifo_in_a_night_never_blocks_status_or_the_nights_tab(project):
    (project / "AGENTS.md").write_text("# agents\n")
    proposed = project / "proposals" / "m"
    proposed.mkdir(parents=True)
    (proposed / "SKILL.md").write_text(OLD + "- more\n")
    skills = project / ".agents" / "skills"
    night = staging.stage_night(
        staging.NightProposal(
            project,
            "20261128T031500Z",
            "tidy",
            proposed,
            skills / "tidy",
            [skills],
            "# n\n",
            {"verdict": "accepted"},
            memory=("# agents\nrules\n", project / "AGENTS.md"),
        )  # fmt: skip
    )
    (night / "memory" / "AGENTS.md").unlink()
    os.mkfifo(night / "memory" / "AGENTS.md")  # the staged memory block
    (project / ".agents" / "skills" / "tidy" / "SKILL.md").unlink()
    os.mkfifo(project / ".agents" / "skills" / "tidy" / "SKILL.md")  # the live skill
    done: list[object] = []
    t = threading.Thread(
        target=lambda: done.append((nights.night_rows(project), nights.night_detail(night))), daemon=True
    )
    t.start()
    t.join(timeout=20)
    assert done, "a FIFO in a night blocked the reader"
    rows, detail = done[0]  # type: ignore[misc]
    assert rows["nights"][0]["state"].startswith("pending (stale")
    assert detail["diffs"][0]["base"].startswith("gone")


def test_a_manifest_of_300_rows_makes_a_bounded_answer(project):
    night = stage(project)
    m = json.loads((night / "manifest.json").read_text())
    big = ("x" * 99 + "\n") * (1 << 14)  # 1.6 MB, under the per-file cap of the reader's callers
    (night / "skill" / "SKILL.md").write_text(big[: (1 << 20) - 1])
    m["files"] = [dict(m["files"][0]) for _ in range(300)]
    (night / "manifest.json").write_text(json.dumps(m))
    reseal(night / "manifest.json")
    answer = json.dumps(nights.night_detail(night))
    assert len(answer) < 16 << 20 and "left out" in answer


def test_a_costly_walk_is_reused_and_a_runs_page_is_read_again_only_when_it_changes(tmp_path, monkeypatch):
    d = dash(tmp_path)
    run = make_run(d.outputs, "a")
    walks: list[int] = []

    def cut_short(root: Path) -> untrusted.Walk:
        walks.append(1)
        return untrusted.Walk([run], "stopped looking after 20000 entries")

    monkeypatch.setattr(views, "walk_runs", cut_short)
    assert d.runs()["note"].startswith("stopped looking") and d.runs()["runs"][0]["id"] == "runs/a"
    assert len(walks) == 1  # an output folder of `/` is not walked at every 2 s poll
    pages: list[Path] = []
    real = views.run_detail
    monkeypatch.setattr(views, "run_detail", lambda root, path, *a: pages.append(path) or real(root, path, *a))
    first = views.cached_detail(d.outputs, run, False, False, d.rows, d.details)
    views.cached_detail(d.outputs, run, False, False, d.rows, d.details)
    assert len(pages) == 1 and first["skill"]["text"] == "# the run's own skill\n"
    (run / "steps" / "e01_s001" / "gate.json.tmp").write_text("{}")
    os.replace(run / "steps" / "e01_s001" / "gate.json.tmp", run / "steps" / "e01_s001" / "gate.json")
    os.utime(run / "steps" / "e01_s001", ns=(1, 1))  # the folder's new mtime, whatever the clock's resolution
    views.cached_detail(d.outputs, run, False, False, d.rows, d.details)
    assert len(pages) == 2  # a step's new record is seen at the next poll


def test_a_sealed_manifest_cannot_aim_a_row_at_another_file_in_the_root(project, capsys):
    other = project / ".agents" / "skills" / "other" / "SKILL.md"
    other.parent.mkdir(parents=True)
    other.write_text("someone else's skill\n")
    night = stage(project)
    m = json.loads((night / "manifest.json").read_text())
    row = m["files"][0]
    row["live_path"] = row["live_realpath"] = str(other)
    row["live_sha256"] = staging.sha256_bytes(other.read_bytes())
    (night / "manifest.json").write_text(json.dumps(m))
    reseal(night / "manifest.json")  # inside the skill root, pinned right, yet not where `skill/SKILL.md` installs
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 2
    assert "is not where row skill/SKILL.md installs" in capsys.readouterr().err
    assert other.read_text() == "someone else's skill\n"


def test_a_config_of_nested_yaml_aliases_is_not_expanded(tmp_path):
    d = dash(tmp_path)
    good, bomb = make_run(d.outputs, "good"), make_run(d.outputs, "bomb")
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]  # 10**10 values
    (bomb / "config.yaml").write_text("\n".join(lines) + "\nexperiment: *a9\nllm: {budget: *a9}\n")
    done: list[object] = []
    t = threading.Thread(target=lambda: done.append((d.runs(), views.run_detail(d.outputs, bomb))), daemon=True)
    t.start()
    t.join(timeout=30)
    assert done, "a YAML alias bomb in a run's config.yaml hung the dashboard"
    rows, detail = done[0]  # type: ignore[misc]
    assert {r["id"] for r in rows["runs"]} == {"runs/good", "runs/bomb"}
    assert RunDir(bomb).read_config() == {} and RunDir(good).read_config()["experiment"] == "searchqa"
    assert len(json.dumps(detail)) < 1 << 20
