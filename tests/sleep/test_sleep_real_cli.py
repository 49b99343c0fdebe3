"""With the real Codex CLI and Claude Code (jailed, against the scripted server): the session logs they write
are harvested, every one and no other; and sessions run by this runner never reach the user's own stores (the
jail's private home holds them and is deleted), even with CODEX_HOME and CLAUDE_CONFIG_DIR set."""

from __future__ import annotations

import pytest
from conftest import need_bwrap, need_harness
from sleep_fixtures import harvest, tasks_of
from sleep_recording import SESSIONS, demo_project, record

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("harness,cli", [("codex", "codex"), ("claude_code", "claude")])
def test_fresh_real_sessions_are_all_harvested_and_replays_stay_out_of_user_stores(tmp_path, monkeypatch, harness, cli):
    need_bwrap()
    need_harness(cli)
    user_codex, user_claude = tmp_path / "user-codex", tmp_path / "user-claude"
    user_codex.mkdir()
    user_claude.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(user_codex))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(user_claude))
    recorded = tmp_path / "recorded"
    files = record(harness, demo_project(tmp_path / "demo"), recorded, tmp_path)
    assert len(files) == len(SESSIONS)
    assert [p for p in user_codex.rglob("*") if p.is_file()] == []
    assert [p for p in user_claude.rglob("*") if p.is_file()] == []
    project = tmp_path / "proj"
    project.mkdir()
    for f in files:  # the recorded working folder becomes this project
        f.write_text(f.read_text().replace("{PROJECT}", str(project)))
    r = harvest(project, recorded, recorded)
    assert r["sessions"] == {harness: len(SESSIONS)} and r["unknown_kinds"] == {}
    assert all(any(p in t for t in tasks_of(project)) for p in SESSIONS)
    assert harvest(project, user_codex, user_claude)["sessions"] == {}
