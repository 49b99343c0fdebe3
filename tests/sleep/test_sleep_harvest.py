"""`python -m skillopt_ray.sleep harvest`: sources, scope, window, redaction, the heuristic miner, the task folder,
splits, state and the review gate, on hand-made stores in the real CLIs' record formats."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from sleep_fixtures import SECRETS, _needles, claude_session, codex_session, harvest, jsonl, tasks_of

from skillopt_ray.cli import review_gate as review
from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.harvest.pipeline import HarvestOptions, run
from skillopt_ray.sleep.harvest.redact import Redactor
from skillopt_ray.sleep.harvest.stores import Stores


@pytest.fixture
def stores(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    return project, tmp_path / "codex", tmp_path / "claude"


def test_both_sources_in_scope_only_and_codex_duplicates_read_once(stores):
    project, ch, cc = stores
    sub = project / "pkg"
    sub.mkdir()
    codex_session(ch, str(project), ["Fix the failing date parser test"], sid="dup-1")
    codex_session(ch, str(project), ["Fix the failing date parser test"], sid="dup-1", archived=True)
    codex_session(ch, str(sub), ["Rename the helper in the package folder"])
    codex_session(ch, str(project.parent), ["Something in the parent folder"])  # an ancestor
    codex_session(ch, str(project.parent / "other"), ["Another project entirely"])
    claude_session(cc, str(project), ["Write a changelog entry for the release"])
    claude_session(cc, str(project), ["A sub-agent's own file"], name="agent-abc")
    r = harvest(project, ch, cc)
    assert r["sessions"] == {"codex": 2, "claude_code": 1}
    assert r["duplicates"] == 1 and r["out_of_scope"] == 2
    got = tasks_of(project)
    assert set(got) == {
        "Fix the failing date parser test",
        "Rename the helper in the package folder",
        "Write a changelog entry for the release",
    }
    ids = {s["id"] for t in got.values() for s in t["metadata"]["source_sessions"]}
    assert "dup-1" in ids
    assert harvest(project, ch, cc, source="claude_code")["files"] == {"claude_code": 1}
    assert harvest(project, ch, cc, source="codex")["sessions"] == {"codex": 2}


def test_scope_all_takes_the_ancestor_folder_session(stores):
    project, ch, cc = stores
    codex_session(ch, str(project.parent), ["Something in the parent folder"])
    assert harvest(project, ch, cc)["sessions"] == {}
    assert harvest(project, ch, cc, scope="all")["sessions"] == {"codex": 1}


def test_truncated_last_line_unknown_kinds_and_non_utf8_bytes_are_counted_not_fatal(stores):
    project, ch, cc = stores
    codex_session(
        ch,
        str(project),
        ["Make the build faster \udcff please"[:21] + " please"],
        extra=({"timestamp": "2020-01-01T10:00:00Z", "type": "brand_new_kind", "payload": {}},),
        tail=b'{"timestamp":"2020-01-01T10:00:01Z","type":"event_msg","payload":{"type":"agent_mess',
    )
    p = claude_session(cc, str(project), ["Explain the config loader"], extra=({"type": "mystery"},))
    with p.open("ab") as f:  # a line with bytes that are not UTF-8
        f.write(b'{"type":"user","cwd":"' + str(project).encode() + b'","message":{"content":"bad \xff\xfe bytes"}}\n')
    r = harvest(project, ch, cc)
    assert r["sessions"] == {"codex": 1, "claude_code": 1}
    assert r["skipped_lines"] == {"truncated": 1}
    assert r["unknown_kinds"] == {"brand_new_kind": 1, "mystery": 1}


def test_window_compares_instants_across_midnight_in_a_non_utc_timezone(stores, monkeypatch):
    """The last harvest was 09:00 in Tokyo (00:00 UTC); a session from 23:50 to 00:10 UTC is in the next window,
    one that ended at 23:59 UTC is not. As strings, "00:10Z" < "09:00+09:00" would have dropped the first."""
    project, ch, cc = stores
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        (project / ".skillopt").mkdir()
        (project / ".skillopt" / "harvest-state.json").write_text(
            json.dumps({"last_harvest": "2020-01-02T09:00:00+09:00", "splits": {}})
        )
        codex_session(
            ch, str(project), ["Across midnight request"], start="2020-01-01T23:50:00Z", end="2020-01-02T00:10:00Z"
        )
        codex_session(
            ch, str(project), ["Before the window request"], start="2020-01-01T23:00:00Z", end="2020-01-01T23:59:00Z"
        )
        r = harvest(project, ch, cc, lookback_given=False)
        assert r["window"]["since"] == "2020-01-02T00:00:00Z"
        assert set(tasks_of(project)) == {"Across midnight request"}
        state = json.loads((project / ".skillopt" / "harvest-state.json").read_text())
        assert state["last_harvest"].endswith("Z") and state["harvests"] == 1
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_every_secret_pattern_is_redacted_in_both_sources_and_counted(stores, monkeypatch):
    project, ch, cc = stores
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRETS["environment_value"])
    text = "Deploy the service with these: " + " ; ".join(SECRETS.values())
    codex_session(ch, str(project), [text, "no, " + text], replies=(text,))
    claude_session(cc, str(project), [text + " please", "still failing " + text], replies=(text,))
    r = run(
        HarvestOptions(project=project, stores=Stores("all", ch, cc), lookback_given=True, lookback=None),
        None,
        Redactor.from_environment(),
    )
    assert r["sessions"] == {"codex": 1, "claude_code": 1}
    assert set(SECRETS) <= set(r["redactions"]), set(SECRETS) - set(r["redactions"])
    files = [p for p in (project / ".skillopt").rglob("*") if p.is_file()]
    assert len(files) >= 6
    for p in files:
        body = p.read_bytes().decode("utf-8", "replace")
        for kind, value in SECRETS.items():
            for needle in _needles(value):
                assert needle not in body, f"{kind} leaked into {p}"
    assert any("[REDACTED:" in (p.read_text()) for p in files if p.name == "task.md")


def test_heuristic_miner_outcome_kind_and_skill_hint(stores):
    project, ch, cc = stores
    codex_session(ch, str(project), ["/init", "Refactor the parser into two modules", "no, revert that"])
    claude_session(
        cc,
        str(project),
        ["What does the retry policy do?", "thanks"],
        extra=(
            {
                "type": "assistant",
                "cwd": str(project),
                "timestamp": "2020-01-01T10:00:00Z",
                "message": {"content": [{"type": "tool_use", "name": "Skill", "input": {"skill": "house-style"}}]},
            },
        ),
    )
    r = harvest(project, ch, cc)
    got = tasks_of(project)
    assert r["tasks_new"] == 2
    a = got["Refactor the parser into two modules"]["metadata"]
    assert (a["kind"], a["outcome"], a["checks"]) == ("agent", "corrected", [])
    assert a["rubric"] and a["workspace"] == {"kind": "empty"}
    b = got["What does the retry policy do?"]["metadata"]
    assert (b["outcome"], b["skill_hint"]) == ("satisfied", "house-style")


def test_same_request_in_two_sessions_is_one_task_with_both_sessions(stores):
    project, ch, cc = stores
    codex_session(ch, str(project), ["Update   the CHANGELOG!"], sid="s-1")
    claude_session(cc, str(project), ["update the changelog"], sid="s-2")
    harvest(project, ch, cc)
    (t,) = tasks_of(project).values()
    assert sorted(s["id"] for s in t["metadata"]["source_sessions"]) == ["s-1", "s-2"]


def test_splits_are_stable_and_a_val_task_stays_in_val(stores):
    project, ch, cc = stores
    for i in range(12):
        codex_session(ch, str(project), [f"Request number {i} about the build"])
    harvest(project, ch, cc, val_fraction=0.5)
    first = {k: v["split"] for k, v in tasks_of(project).items()}
    assert set(first.values()) == {"train", "val", "test"}
    import shutil

    shutil.rmtree(project / ".skillopt" / "tasks")
    harvest(project, ch, cc, val_fraction=0.01)  # a smaller fraction later: earlier val tasks stay in val
    again = {k: v["split"] for k, v in tasks_of(project).items()}
    assert again == first


def test_second_harvest_reads_since_the_first_and_keeps_reviewed_tasks(stores):
    project, ch, cc = stores
    codex_session(ch, str(project), ["An old request about logging"], start="2020-01-01T10:00:00Z")
    harvest(project, ch, cc)
    folder = project / ".skillopt" / "tasks"
    data = json.loads((folder / "review.json").read_text())
    assert data["reviewed"] is False and len(data["tasks"]) == 1
    data["reviewed"] = True
    (folder / "review.json").write_text(json.dumps(data))
    r = harvest(project, ch, cc, lookback_given=False)  # since the last harvest: the old session is out
    assert r["sessions"] == {} and r["out_of_window"] == 1
    assert json.loads((folder / "review.json").read_text())["reviewed"] is True
    time.sleep(1.1)  # the session starts after the last harvest (stamps are whole seconds)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    codex_session(ch, str(project), ["A new request about metrics"], start=now)
    harvest(project, ch, cc, lookback_given=False)
    assert json.loads((folder / "review.json").read_text())["reviewed"] is False  # a new task: review again


def test_task_folder_loads_with_the_custom_loader_unchanged(stores):
    from skillopt_envs.custom.benchmark import CustomBenchmark

    project, ch, cc = stores
    codex_session(ch, str(project), ["Add type hints to the config module"])
    claude_session(cc, str(project), ["Explain the scheduler in one paragraph"])
    claude_session(cc, str(project), ["List the public functions of the API"])
    harvest(project, ch, cc)
    bench = CustomBenchmark({"data_dir": str(project / ".skillopt" / "tasks"), "options": {}})
    loaded = [t for s in ("train", "val", "test") for t in bench.load_split(s)]
    assert sorted(t.payload["task"]["prompt"].strip() for t in loaded) == [
        "Add type hints to the config module",
        "Explain the scheduler in one paragraph",
        "List the public functions of the API",
    ]
    assert sorted(len(bench.load_split(s)) for s in ("train", "val", "test")) == [1, 1, 1]


def test_check_program_reports_failures_in_words_without_patterns(tmp_path):
    from skillopt_ray.sleep.harvest.task_folder import CHECK_PROGRAM

    task = {"metadata": {"checks": [{"op": "contains", "arg": "zebra-42"}, {"op": "max_chars", "arg": 100}]}}
    (tmp_path / "task.json").write_text(json.dumps(task))
    (tmp_path / "reply.txt").write_text("a short reply")
    out = subprocess.run(
        ["python3", str(CHECK_PROGRAM), str(tmp_path / "task.json"), str(tmp_path)], capture_output=True, text=True
    ).stdout
    assert out.strip().splitlines()[-1] == "0.5" and "FAIL: check 1" in out and "zebra" not in out
    (tmp_path / "task.json").write_text(json.dumps({"metadata": {"checks": [], "rubric": "r"}}))
    out = subprocess.run(
        ["python3", str(CHECK_PROGRAM), str(tmp_path / "task.json"), str(tmp_path)], capture_output=True, text=True
    ).stdout
    assert "judged by its rubric" in out.splitlines()[-1]  # no number: a data error, not a 0


def test_review_gate_refuses_unreviewed_tasks_for_a_remote_endpoint(tmp_path):
    review.write(tmp_path, {"reviewed": False, "tasks": []})
    remote = review.Endpoint("openai", "https://api.openai.com/v1")
    local = review.Endpoint("openai", "http://127.0.0.1:8080/v1")
    review.require_reviewed(tmp_path, [local], False)
    review.require_reviewed(tmp_path, [remote], True)
    with pytest.raises(review.ReviewRefused, match=r"api\.openai\.com.*--i-reviewed"):
        review.require_reviewed(tmp_path, [local, remote], False)
    review.write(tmp_path, {"reviewed": True, "tasks": []})
    review.require_reviewed(tmp_path, [remote], False)


def test_agent_task_workspace_is_the_sessions_commit_from_git(stores):
    project, ch, cc = stores
    for cmd in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", *cmd], cwd=project, check=True)
    (project / "app.py").write_text("print('v1')\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "v1"], cwd=project, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
    (project / "app.py").write_text("print('live edit')\n")  # the live checkout is never what the task gets
    codex_session(ch, str(project), ["Make app.py print the version"], commit=sha)
    codex_session(ch, str(project), ["Make app.py print the date"], commit="0" * 40)
    harvest(project, ch, cc)
    got = {t: v["metadata"]["workspace"] for t, v in tasks_of(project).items()}
    assert got == {
        "Make app.py print the version": {"kind": "git", "commit": sha},
        "Make app.py print the date": {"kind": "empty"},
    }
    folders = [d for d in (project / ".skillopt" / "tasks").iterdir() if d.is_dir()]
    ws = {(d / "task.md").read_text().strip(): d / "workspace" for d in folders}
    assert (ws["Make app.py print the version"] / "app.py").read_text() == "print('v1')\n"
    assert list(ws["Make app.py print the date"].iterdir()) == []


def test_cli_bad_harvest_flags_exit_2(stores, capsys):
    project, ch, cc = stores
    assert main(["harvest", "--project", str(project), "--lookback", "soon", "--no-model"]) == 2
    assert "--lookback" in capsys.readouterr().err
    assert main(["harvest", "--project", str(project / "nope"), "--no-model"]) == 2
    assert main(["harvest", "--project", str(project), "--no-model", "--output", "tasks.jsonl"]) == 2
    assert "task folder" in capsys.readouterr().err


def test_cli_harvest_writes_nothing_outside_the_project(stores, capsys, monkeypatch, tmp_path):
    project, ch, cc = stores
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    codex_session(ch, str(project), ["Add a retry to the uploader"])
    rc = main(
        [
            "harvest",
            "--project",
            str(project),
            "--codex-home",
            str(ch),
            "--claude-home",
            str(cc),
            "--lookback",
            "all",
            "--no-model",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "1 new" in out and f"no claude_code session store at {cc} (give --claude-home)" in out
    assert list(home.iterdir()) == []
    assert (project / ".skillopt" / "harvest-state.json").is_file()


def test_the_default_embedded_optimizer_mines_with_the_heuristic_and_says_so(stores, capsys):
    project, ch, cc = stores
    codex_session(ch, str(project), ["Add a retry to the uploader"])
    argv = [
        "harvest",
        "--project",
        str(project),
        "--codex-home",
        str(ch),
        "--claude-home",
        str(cc),
        "--lookback",
        "all",
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "embedded model" in err and "heuristic" in err and "1 new" in out


def test_a_broken_state_file_is_one_line_and_never_reset(stores, capsys):
    project, ch, cc = stores
    (project / ".skillopt").mkdir()
    (project / ".skillopt" / "harvest-state.json").write_text("{not json")
    assert main(["harvest", "--project", str(project), "--no-model", "--codex-home", str(ch)]) == 2
    err = capsys.readouterr().err.strip()
    assert "harvest-state.json" in err and "\n" not in err
    assert (project / ".skillopt" / "harvest-state.json").read_text() == "{not json"


def test_remote_optimizer_needs_send_digests(stores, capsys):
    project, ch, cc = stores
    rc = main(
        [
            "harvest",
            "--project",
            str(project),
            "--codex-home",
            str(ch),
            "--claude-home",
            str(cc),
            "llm=openai",
            "llm.optimizer.base_url=https://api.example.com/v1",
        ]  # fmt: skip
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--send-digests" in err and "api.example.com" in err and "\n" not in err
    assert not (project / ".skillopt").exists()


def test_send_digests_is_asked_once_per_project_and_host(stores, capsys, monkeypatch):
    from scripted_server import ScriptedServer

    from skillopt_ray.cli import review_gate as review_mod

    project, ch, cc = stores
    codex_session(ch, str(project), ["Add a retry to the uploader"])
    monkeypatch.setenv("COMPATIBLE_API_KEY", "k")
    monkeypatch.setattr(review_mod, "LOCAL_HOSTS", set())  # the scripted server on 127.0.0.1 stands in for a remote one
    with ScriptedServer(policy=lambda body, headers: "[]") as srv:
        argv = ["harvest", "--project", str(project), "--codex-home", str(ch), "--claude-home", str(cc),
                "--lookback", "all", "llm=compatible", f"llm.base_url={srv.base_url}"]  # fmt: skip
        assert main(argv) == 2 and "--send-digests" in capsys.readouterr().err
        assert main([*argv, "--send-digests"]) == 0
        assert main(argv) == 0  # remembered for this project and host
        assert srv.state.requests[("optimizer", "harvest_mine")] == 2
    state = json.loads((project / ".skillopt" / "harvest-state.json").read_text())
    assert state["digest_hosts"] == ["127.0.0.1"]


def test_session_logs_older_than_the_window_are_not_opened(stores):
    project, ch, cc = stores
    p = codex_session(ch, str(project), ["Stale request"], start="2020-01-01T10:00:00Z")
    os.utime(p, (0, 1_000_000_000))  # written in 2001
    r = run(HarvestOptions(project=project, stores=Stores("all", ch, cc)), None, Redactor())
    assert r["out_of_window"] == 1 and r["sessions"] == {}
    jsonl(ch / "sessions" / "x" / "rollout-bad.jsonl", [])  # an empty log is no session


def test_real_cli_fixtures_every_in_scope_session_and_no_other(stores, tmp_path):
    """The committed logs written by the real Codex CLI 0.171 and Claude Code 2.1.197 (tests/sleep_recording.py):
    in the project they are all found, with their requests, tools, skill and ids; in a parent folder none are."""
    from sleep_fixtures import REAL, real_fixtures
    from sleep_recording import SESSIONS

    project, ch, cc = stores
    files = real_fixtures(project, ch, cc)
    assert len(files) == 4
    r = harvest(project, ch, cc)
    assert r["sessions"] == {"codex": 2, "claude_code": 2} and r["unknown_kinds"] == {} and r["skipped_lines"] == {}
    got = tasks_of(project)
    for prompt in SESSIONS:
        assert [t for t in got if prompt in t], prompt
    assert all(t["metadata"]["kind"] == "agent" for t in got.values())
    hints = sorted(t["metadata"]["skill_hint"] for t in got.values())
    assert hints == ["", "", "demo", "demo"]  # the sessions that read .agents/skills/demo/SKILL.md, in both CLIs
    ids = {s["id"] for t in got.values() for s in t["metadata"]["source_sessions"]}
    want = {f.stem[-36:] for f in (REAL / "codex").rglob("*.jsonl")} | {
        f.stem for f in (REAL / "claude").rglob("*.jsonl")
    }
    assert ids == want
    elsewhere = tmp_path / "parent" / "proj"
    elsewhere.mkdir(parents=True)
    real_fixtures(elsewhere.parent, tmp_path / "c2", tmp_path / "k2")
    assert harvest(elsewhere, tmp_path / "c2", tmp_path / "k2")["sessions"] == {}


def test_a_training_run_refuses_an_unreviewed_harvest_for_a_remote_endpoint(stores, capsys, monkeypatch):
    """`python -m skillopt_ray +experiment=custom env.data_dir=<harvest>` with a remote model: one line, exit 2,
    nothing made; the same run goes ahead to its next check once review.json says reviewed."""
    from skillopt_ray import cli

    project, ch, cc = stores
    for i in range(3):
        codex_session(ch, str(project), [f"Harvested request number {i}"])
    harvest(project, ch, cc)
    folder = project / ".skillopt" / "tasks"
    out = project / "runs"
    monkeypatch.setenv("COMPATIBLE_API_KEY", "k")
    argv = ["+experiment=custom", f"env.data_dir={folder}", "llm=compatible", "llm.base_url=https://api.example.com/v1",
            "ray.address=127.0.0.1:9", f"output_dir={out}"]  # fmt: skip
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "review.json" in err and "api.example.com" in err and "\n" not in err, err
    assert not out.exists()
    data = json.loads((folder / "review.json").read_text())
    (folder / "review.json").write_text(json.dumps({**data, "reviewed": True}))
    cli.main(argv)
    assert "review.json" not in capsys.readouterr().err
