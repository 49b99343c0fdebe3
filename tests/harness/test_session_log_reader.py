"""The CLI's session log is read from a home the agent's own commands can write: what it plants there (a symlink to
a host file, a FIFO, a hard link, a huge file) is skipped, never read and never blocks the episode."""

from __future__ import annotations

import json
import os
import threading

from skillopt_ray.harness import runner

SECRET = {"type": "event_msg", "payload": {"message": "sk-host-secret-0123"}}


def _log(path, events):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def test_the_real_log_is_read_and_what_the_agent_planted_is_not(tmp_path):
    home = tmp_path / "home"
    host = tmp_path / "host-secret.jsonl"
    _log(host, [SECRET])
    own = {"type": "session_meta", "payload": {"id": "own"}}
    _log(home / ".codex/sessions/2026/12/07/rollout-a.jsonl", [own])
    (home / ".codex/sessions/2026/12/07/rollout-link.jsonl").symlink_to(host)
    os.link(host, home / ".codex/sessions/2026/12/07/rollout-hard.jsonl")
    os.mkfifo(home / ".codex/sessions/2026/12/07/rollout-fifo.jsonl")
    (home / ".codex/sessions/elsewhere").symlink_to(host.parent)  # a linked folder is not walked into
    done: list[list] = []
    t = threading.Thread(target=lambda: done.append(runner._session_events(home, "codex")), daemon=True)
    t.start()
    t.join(timeout=20)
    assert done, "a FIFO in the session folder blocked the reader"
    assert done[0] == [own]


def test_a_log_grown_past_its_cap_is_skipped_and_claude_logs_are_found(tmp_path, monkeypatch):
    home = tmp_path / "home"
    own = {"type": "user", "message": {"content": "hi"}}
    _log(home / ".claude/projects/-work/s1.jsonl", [own])
    _log(home / ".claude/projects/-work/s2.jsonl", [own] * 50)
    monkeypatch.setattr(runner, "SESSION_LOG_BYTES", 1000)
    assert runner._session_events(home, "claude_code") == [own]
    assert runner._session_events(home, "codex") == []  # no Codex folder at all: nothing, no error
