"""The harvest under odd input: a record of an unexpected shape is skipped with a count (never a traceback), and a
harvest that found no session store does not move the window's start."""

from __future__ import annotations

import json

import pytest
from sleep_fixtures import claude_session, codex_session

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.harvest.pipeline import HarvestOptions, run
from skillopt_ray.sleep.harvest.redact import Redactor
from skillopt_ray.sleep.harvest.stores import Stores

T = "2020-01-01T10:00:00.000Z"


@pytest.fixture
def stores(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    return project, tmp_path / "codex", tmp_path / "claude"


def _run(project, ch, cc):
    opts = HarvestOptions(project=project, stores=Stores("all", ch, cc), lookback=None, lookback_given=True)
    return run(opts, None, Redactor())


def test_odd_records_are_skipped_with_a_count_and_the_rest_is_harvested(stores):
    project, ch, cc = stores
    odd_codex = (
        {"timestamp": T, "type": "response_item", "payload": {"type": "message", "role": "user", "content": 7}},
        {"timestamp": T, "type": "response_item", "payload": {"type": "message", "role": "assistant", "content": 7}},
        {"timestamp": T, "type": "response_item", "payload": {"type": "function_call", "arguments": {"cmd": "ls"}}},
        {"timestamp": T, "type": "response_item", "payload": {"type": "function_call", "arguments": 5}},
        {"timestamp": T, "type": "event_msg", "payload": {"type": "user_message", "message": {"a": 1}}},
        {"timestamp": T, "type": "session_meta", "payload": {"git": "not an object", "cwd": str(project)}},
    )
    deep = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    codex_session(ch, str(project), ["Fix the flaky retry test in the client"], extra=odd_codex, tail=deep)
    base = {"sessionId": "s", "cwd": str(project), "timestamp": T}
    odd_claude = (
        {**base, "type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Bash", "input": "ls"}]}},
        {**base, "type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Read", "input": 3}]}},
        {**base, "type": "user", "message": {"content": [{"type": "text", "text": {"x": 1}}]}},
        {**base, "type": "user", "message": "not an object"},
        {**base, "type": "assistant", "message": {"content": 12}},
    )
    claude_session(cc, str(project), ["Write the release notes for version two"], extra=odd_claude, tail=deep)
    r = _run(project, ch, cc)
    assert r["sessions"] == {"codex": 1, "claude_code": 1}
    assert r["tasks_new"] == 2
    assert r["skipped_lines"].get("too_deep") == 2, r["skipped_lines"]


def test_the_cli_harvests_odd_records_without_a_traceback(stores, capsys):
    project, ch, cc = stores
    bad = {"timestamp": T, "type": "response_item", "payload": {"type": "function_call", "arguments": {"cmd": 1}}}
    codex_session(ch, str(project), ["Fix the flaky retry test in the client"], extra=(bad,))
    argv = ["harvest", "--project", str(project), "--codex-home", str(ch), "--claude-home", str(cc)]
    assert main([*argv, "--lookback", "all", "--json", "--no-model"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks_new"] == 1


def test_a_harvest_with_no_session_store_keeps_the_window_start(stores, capsys):
    project, ch, cc = stores
    argv = ["harvest", "--project", str(project), "--codex-home", str(ch), "--claude-home", str(cc), "--no-model"]
    assert main(argv) == 0  # neither store exists
    out = capsys.readouterr().out
    assert "no codex session store" in out and "window not moved" in out
    st = project / ".skillopt" / "harvest-state.json"
    assert not st.exists() or json.loads(st.read_text())["last_harvest"] is None
    codex_session(ch, str(project), ["Fix the flaky retry test in the client"], start="2020-01-01T10:00:00.000Z")
    assert main([*argv, "--lookback", "all"]) == 0
    capsys.readouterr()
    # a later harvest without --lookback starts from the last one and says so
    assert main(argv) == 0
    assert "since the last harvest" in capsys.readouterr().out
