"""Checks that are checked (issue 47, item 2): the heuristic miner proposes `command_succeeds` from the session's own
test command that failed and later passed; a mined check is tried, in the check sandbox, on the reply the user
accepted and the one they corrected, and one that passes on the corrected reply (or fails on the accepted one) is
dropped, with its reason in review.json; a check the session gives no evidence for is kept as `unverified`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from scripted_server import ScriptedServer
from sleep_fixtures import jsonl

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.harvest.verify import Evidence, command_verdict

T0 = "2020-01-01T10:00:00.000Z"
TEST = "python -m pytest -q tests/test_parse.py"


def _claude(home: Path, cwd: str, turns: list[tuple[str, Any]], sid: str = "c1") -> Path:
    """A Claude Code log from turns: ("user", text), ("reply", text), ("bash", (command, failed))."""
    base = {"sessionId": sid, "cwd": cwd, "gitBranch": "main", "isSidechain": False, "version": "2.1.0"}
    recs: list[dict[str, Any]] = []
    for n, (kind, value) in enumerate(turns):
        if kind == "user":
            recs.append({**base, "type": "user", "timestamp": T0, "message": {"role": "user", "content": value}})
        elif kind == "reply":
            block = {"type": "text", "text": value}
            recs.append(
                {**base, "type": "assistant", "timestamp": T0, "message": {"role": "assistant", "content": [block]}}
            )
        else:
            cmd, failed = value
            use = {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": cmd}}
            res = {"type": "tool_result", "tool_use_id": f"t{n}", "content": "Exit code 1" if failed else "ok",
                   "is_error": failed}  # fmt: skip
            recs.append(
                {**base, "type": "assistant", "timestamp": T0, "message": {"role": "assistant", "content": [use]}}
            )
            recs.append({**base, "type": "user", "timestamp": T0, "message": {"role": "user", "content": [res]}})
    return jsonl(home / "projects" / cwd.replace("/", "-") / f"{sid}.jsonl", recs)


def _codex(home: Path, cwd: str, turns: list[tuple[str, Any]], sid: str = "01a22055-0000-7000-8000-000000000001",
           commit: str = "") -> Path:  # fmt: skip
    """A Codex 0.171 rollout: the user's turns only as model-facing messages, commands as finished items, patches
    as apply_patch calls."""
    meta: dict[str, Any] = {"id": sid, "timestamp": T0, "cwd": cwd}
    if commit:
        meta["git"] = {"commit_hash": commit, "branch": "main"}
    recs: list[dict[str, Any]] = [{"timestamp": T0, "type": "session_meta", "payload": meta}]
    for kind, value in turns:
        if kind == "patch":
            call = {"type": "custom_tool_call", "name": "apply_patch", "call_id": "p", "input": value}
            recs.append({"timestamp": T0, "type": "response_item", "payload": call})
        elif kind in ("user", "reply"):
            role, part = ("user", "input_text") if kind == "user" else ("assistant", "output_text")
            item = {"type": "message", "role": role, "content": [{"type": part, "text": value}]}
            recs.append({"timestamp": T0, "type": "response_item", "payload": item})
        else:
            cmd, failed = value
            call = {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
            recs.append({"timestamp": T0, "type": "response_item", "payload": call})
            done = {"type": "CommandExecution", "process_id": "7", "command": ["/bin/sh", "-lc", cmd],
                    "exit_code": 1 if failed else 0, "status": "completed"}  # fmt: skip
            recs.append({"timestamp": T0, "type": "event_msg", "payload": {"type": "item_completed", "item": done}})
    return jsonl(home / "sessions" / "2020" / "01" / "01" / f"rollout-2020-01-01T10-00-00-{sid}.jsonl", recs)


FIXED = [
    ("user", "Fix the failing parser test in tests/test_parse.py"),
    ("bash", (TEST, True)),
    ("bash", ("cat src/parse.py", False)),
    ("bash", (TEST, False)),
    ("reply", "Fixed: the parser now accepts empty lines."),
    ("user", "thanks, works now"),
]


def _harvest(project: Path, ch: Path, cc: Path, *extra: str) -> dict:
    argv = ["harvest", "--project", str(project), "--codex-home", str(ch), "--claude-home", str(cc),
            "--lookback", "all", "--json", *extra]  # fmt: skip
    assert main(argv) == 0
    return {d.name: json.loads((d / "task.json").read_text()) for d in (project / ".skillopt" / "tasks").iterdir()
            if d.is_dir()}  # fmt: skip


def _review(project: Path) -> dict:
    return json.loads((project / ".skillopt" / "tasks" / "review.json").read_text())


def test_the_heuristic_miner_proposes_the_test_command_that_failed_then_passed(tmp_path, capsys):
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    project.mkdir()
    _claude(cc, str(project), FIXED)
    _codex(ch, str(project), [(k, v.replace("parser", "lexer") if k == "user" else v) for k, v in FIXED])
    # a session whose tests only ever passed, and one whose fix never passed, propose no check
    _claude(cc, str(project), [("user", "Run the tests and tell me if they pass"), ("bash", (TEST, False)),
                               ("reply", "They pass.")], sid="c2")  # fmt: skip
    _claude(cc, str(project), [("user", "Make the flaky network test pass"), ("bash", ("pytest -q", True)),
                               ("bash", ("pytest -q", True)), ("reply", "Still failing.")], sid="c3")  # fmt: skip
    tasks = _harvest(project, ch, cc, "--no-model")
    by_prompt = {t["metadata"]["source_sessions"][0]["id"]: t["metadata"] for t in tasks.values()}
    for sid in ("c1", "01a22055-0000-7000-8000-000000000001"):
        m = by_prompt[sid]
        assert m["kind"] == "agent" and m["checks"] == [{"op": "command_succeeds", "arg": TEST}], m
        (r,) = m["check_review"]
        assert r["status"] == "verified" and "failed, then passed" in r["reason"]
    assert by_prompt["c2"]["checks"] == [] and by_prompt["c3"]["checks"] == []
    review = _review(project)
    assert {t for t, rs in review["checks"].items() if rs[0]["status"] == "verified"} == {
        t for t, v in tasks.items() if v["metadata"]["checks"]
    }
    report = json.loads(capsys.readouterr().out)
    assert report["checks"] == {"verified": 2, "unverified": 0, "dropped": 0}


CORRECTED = [
    ("user", "Which flag makes the deploy script print its plan without deploying?"),
    ("reply", "Use the --force flag."),
    ("user", "no, that's wrong: --force deploys"),
    ("reply", "Use the --dry-run flag: it prints the plan and deploys nothing."),
    ("user", "thanks"),
]


def test_a_mined_check_that_passes_on_the_corrected_reply_is_dropped(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPATIBLE_API_KEY", "test-key-not-secret")
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    project.mkdir()
    _claude(cc, str(project), CORRECTED)
    mined = [{
        "prompt": "Which flag makes the deploy script print its plan without deploying?",
        "kind": "chat",
        "checks": [
            {"op": "contains", "arg": "--dry-run"},  # tells the two replies apart: verified
            {"op": "contains", "arg": "flag"},  # passes on the corrected reply too: dropped
            {"op": "max_chars", "arg": 20},  # fails on the accepted reply: dropped
        ],
        "outcome": "satisfied",
    }]  # fmt: skip
    with ScriptedServer(policy=lambda body, headers: json.dumps(mined)) as srv:
        tasks = _harvest(project, ch, cc, "llm=compatible", f"llm.base_url={srv.base_url}")
    ((tid, task),) = tasks.items()
    assert task["metadata"]["checks"] == [{"op": "contains", "arg": "--dry-run"}]
    got = {r["arg"]: (r["status"], r["reason"]) for r in _review(project)["checks"][tid]}
    assert got["--dry-run"][0] == "verified"
    assert got["flag"] == ("dropped", "it passes on the reply the user corrected: it does not tell good from bad")
    assert got[20] == ("dropped", "it fails on the reply the user accepted")
    assert json.loads(capsys.readouterr().out)["checks"] == {"verified": 1, "unverified": 0, "dropped": 2}


def test_a_check_with_no_recorded_outcome_is_kept_unverified_and_a_task_left_bare_gets_a_rubric(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPATIBLE_API_KEY", "test-key-not-secret")
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    project.mkdir()
    _claude(
        cc, str(project), [("user", "Summarise the changelog for 2.0 in three bullets"), ("reply", "- a\n- b\n- c")]
    )
    _claude(cc, str(project), CORRECTED, sid="c2")
    mined = [{"prompt": "Summarise the changelog in three bullets", "kind": "chat",
              "checks": [{"op": "regex", "arg": "^- [a-z]"}]}]  # fmt: skip
    flag = [
        {"prompt": "Which flag prints the deploy plan?", "kind": "chat", "checks": [{"op": "contains", "arg": "Use"}]}
    ]

    def policy(body, headers):
        return json.dumps(flag if "deploy" in body["messages"][1]["content"] else mined)

    with ScriptedServer(policy=policy) as srv:
        tasks = _harvest(project, ch, cc, "llm=compatible", f"llm.base_url={srv.base_url}")
    by = {t["metadata"]["source_sessions"][0]["id"]: t["metadata"] for t in tasks.values()}
    assert by["c1"]["checks"] == [{"op": "regex", "arg": "^- [a-z]"}]
    assert by["c1"]["check_review"][0]["status"] == "unverified"
    assert by["c2"]["checks"] == [] and by["c2"]["rubric"]  # its only check dropped: the rubric judges it


def test_a_command_check_is_judged_by_the_sessions_own_runs():
    def run(ok: bool, turn: int) -> Any:
        return {"command": "make test", "ok": ok, "turn": turn}

    fixed = Evidence(runs=[run(False, 1), run(True, 2)], correction_turns=[2], satisfied=True)
    assert command_verdict("make  test", fixed)[0] == "verified"
    passed_then_corrected = Evidence(runs=[run(True, 1), run(True, 2)], correction_turns=[2], satisfied=True)
    assert command_verdict("make test", passed_then_corrected) == (
        "dropped", "it passed in the session on work the user then corrected")  # fmt: skip
    broken_at_the_end = Evidence(runs=[run(True, 1), run(False, 1)], satisfied=True)
    assert command_verdict("make test", broken_at_the_end)[0] == "dropped"
    assert command_verdict("make check", fixed) == ("unverified", "the session never ran this command")


def test_the_real_cli_logs_record_each_commands_exit_status(tmp_path):
    from sleep_fixtures import real_fixtures

    from skillopt_ray.sleep.harvest.sources import claude, codex

    project = tmp_path / "proj"
    project.mkdir()
    files = real_fixtures(project, tmp_path / "codex", tmp_path / "claude")
    runs = {}
    for f in files:
        parse = codex.parse if "rollout-" in f.name else claude.parse
        d = parse(f, lambda s: s, lambda cwd: True)
        assert d is not None
        runs[(d.source, f.name)] = [(r["command"], r["ok"]) for r in d.runs]
    assert sorted(runs.values()) == sorted(
        [[("cat README.md", True)], [("cat .agents/skills/demo/SKILL.md", True)]] * 2
    ), runs


CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n        self.assertEqual(add(2, 3), 5)\n"


def _repo(project: Path, test: str = TEST_CALC, links: Optional[dict[str, Path]] = None) -> str:
    """A git repository holding calc.py and its test (and `links`: name -> where the symlink points), committed."""
    import subprocess

    project.mkdir()
    (project / "calc.py").write_text(CALC)
    (project / "test_calc.py").write_text(test)
    for name, to in (links or {}).items():
        (project / name).symlink_to(to)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "calc"]):
        subprocess.run(["git", "-C", str(project), *cmd], check=True, env={**env, "PATH": "/usr/bin:/bin"})
    return subprocess.run(["git", "-C", str(project), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def _patch(old: str, new: str) -> tuple[str, str]:
    return (
        "patch",
        f"*** Begin Patch\n*** Update File: calc.py\n@@\n-    return {old}\n+    return {new}\n*** End Patch",
    )


UNITTEST = "python3 -m unittest -q test_calc"


def test_a_command_check_is_tried_on_the_replayed_workspaces_accepted_and_corrected(tmp_path, capsys):
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    commit = _repo(project)
    _codex(ch, str(project), commit=commit, turns=[
        ("user", "Fix add() in calc.py so that the tests pass"),
        ("bash", (UNITTEST, True)),
        _patch("a - b", "a * b"),
        ("bash", (UNITTEST, True)),
        ("reply", "Fixed."),
        ("user", "no, it still fails"),
        _patch("a * b", "a + b"),
        ("bash", (UNITTEST, False)),
        ("reply", "Fixed now."),
        ("user", "thanks"),
    ])  # fmt: skip
    (task,) = _harvest(project, ch, cc, "--no-model").values()
    m = task["metadata"]
    assert m["checks"] == [{"op": "command_succeeds", "arg": UNITTEST}] and m["workspace"]["kind"] == "git"
    (r,) = m["check_review"]
    assert r["status"] == "verified" and "replayed" in r["reason"] and "fails on one they corrected" in r["reason"], r
    assert (project / "calc.py").read_text() == CALC  # replayed in a scratch folder, never the checkout


def test_a_command_check_that_passes_on_the_replayed_corrected_workspace_is_dropped(tmp_path, capsys):
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    commit = _repo(project, TEST_CALC.replace("        self.assertEqual(add(2, 3), 5)\n", ""))  # 2*2 is 4 too
    _codex(ch, str(project), commit=commit, turns=[
        ("user", "Fix add() in calc.py so that the tests pass"),
        ("bash", (UNITTEST, True)),
        _patch("a - b", "a * b"),
        ("reply", "Fixed."),
        ("user", "no, that's wrong: add(2, 3) must be 5"),
        _patch("a * b", "a + b"),
        ("bash", (UNITTEST, False)),
        ("reply", "Fixed now."),
        ("user", "thanks"),
    ])  # fmt: skip
    (task,) = _harvest(project, ch, cc, "--no-model").values()
    assert task["metadata"]["checks"] == [] and task["metadata"]["rubric"]
    (r,) = _review(project)["checks"][next(iter(_review(project)["checks"]))]
    assert r["status"] == "dropped" and r["reason"].startswith("it passes on the workspace"), r


def test_without_a_correction_the_workspace_before_the_edits_is_the_outcome_to_fail_on(tmp_path, capsys):
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    commit = _repo(project)
    _codex(ch, str(project), commit=commit, turns=[
        ("user", "Fix add() in calc.py so that the tests pass"),
        ("bash", (UNITTEST, True)),
        _patch("a - b", "a + b"),
        ("bash", (UNITTEST, False)),
        ("reply", "Fixed."),
        ("user", "thanks"),
    ])  # fmt: skip
    (task,) = _harvest(project, ch, cc, "--no-model").values()
    (r,) = task["metadata"]["check_review"]
    assert r["status"] == "verified" and r["reason"].endswith("fails before the session's edits"), r


def test_codex_patches_and_claude_edits_replay_exactly_or_not_at_all(tmp_path):
    import pytest

    from skillopt_ray.sleep.harvest.replay import apply, apply_patch, relative

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("one\ntwo\nthree\n")
    apply_patch(ws, "*** Begin Patch\n*** Add File: pkg/new.py\n+x = 1\n*** Update File: a.py\n*** Move to: b.py\n"
                    "@@\n one\n-two\n+2\n*** End Patch")  # fmt: skip
    assert (ws / "pkg" / "new.py").read_text() == "x = 1\n" and (ws / "b.py").read_text() == "one\n2\nthree\n"
    assert not (ws / "a.py").exists()
    apply(ws, {"op": "replace", "path": "b.py", "old": "2", "new": "two", "every": False, "turn": 1})
    assert (ws / "b.py").read_text() == "one\ntwo\nthree\n"
    for bad in ("*** Begin Patch\n*** Update File: b.py\n@@\n-missing\n+x\n*** End Patch",
                "*** Begin Patch\n*** Add File: ../out.py\n+x\n*** End Patch"):  # fmt: skip
        with pytest.raises(ValueError):
            apply_patch(ws, bad)
    with pytest.raises(ValueError):  # "o" is in the file more than once: not an exact edit
        apply(ws, {"op": "replace", "path": "b.py", "old": "o", "new": "0", "every": False, "turn": 1})
    assert not (tmp_path / "out.py").exists()
    assert relative("/home/u/proj/src/x.py", "/home/u/proj") == "src/x.py"
    assert relative("/etc/passwd", "/home/u/proj") == "" and relative("../x", "/home/u/proj") == ""


def test_a_replayed_edit_never_writes_through_a_link_the_commit_holds(tmp_path):
    """The replay writes in place: that is safe only because its workspace holds no link anyone planted. A commit's
    symlinks (to a file or a folder outside) are not materialised, so the session's edits of those names write new
    files inside the workspace and nothing outside changes."""
    import os

    from skillopt_ray.sleep.harvest import recipe
    from skillopt_ray.sleep.harvest.replay import replayed

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.py").write_text("precious\n")
    commit = _repo(tmp_path / "proj", links={"link.py": outside / "target.py", "dir_link": outside})
    ws = tmp_path / "ws"
    assert recipe.materialise(tmp_path / "proj", {"kind": "git", "commit": commit}, ws) == ""
    assert sorted(p.name for p in ws.iterdir()) == ["calc.py", "test_calc.py"]
    edits: list[Any] = [
        {"op": "write", "path": "link.py", "old": "", "new": "mine\n", "every": False, "turn": 1},
        {"op": "write", "path": "dir_link/x.py", "old": "", "new": "x\n", "every": False, "turn": 1},
        {"op": "patch", "path": "", "old": "", "every": False, "turn": 1,
         "new": "*** Begin Patch\n*** Add File: dir_link/y.py\n+y\n*** End Patch"},
    ]  # fmt: skip
    replayed(ws, edits, 2)
    assert (outside / "target.py").read_text() == "precious\n" and sorted(os.listdir(outside)) == ["target.py"]
    assert (ws / "link.py").read_text() == "mine\n" and (ws / "dir_link" / "y.py").read_text() == "y\n"
    for folder, dirs, files in os.walk(ws):
        for name in [*dirs, *files]:
            st = os.lstat(os.path.join(folder, name))
            assert not os.path.islink(os.path.join(folder, name)) and (name in dirs or st.st_nlink == 1), name


def test_a_codex_session_longer_than_the_timeline_keeps_its_last_replies(tmp_path, monkeypatch):
    from skillopt_ray.sleep.harvest.sources import codex

    monkeypatch.setattr(codex, "MAX_TIMELINE", 5)
    turns = [("user", "Tidy the module please")] + [("bash", (f"ls {i}", False)) for i in range(10)]
    path = _codex(tmp_path, "/p", turns + [("reply", "first"), ("reply", "the last word"), _patch("a", "b")])
    d = codex.parse(path, lambda s: s, lambda cwd: True)
    assert d is not None and d.replies[-1] == "the last word" and len(d.runs) == 4
    assert d.edits_whole is False and d.edits == []  # a patch past the timeline: no replay of this session
