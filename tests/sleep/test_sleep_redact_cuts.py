"""Redact first, then cut: a planted secret split across any of the digest's cuts (a request's first 800
characters, a correction's 200, a command's or a file's 300, a reply's last 800) leaves no 8-character fragment
in the digest, in the task folder written, or in the miner's request; and the secret assignments and command-line
passwords the patterns missed before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted_server import ScriptedServer
from sleep_fixtures import SECRETS, _needles, claude_session, codex_session

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.harvest import digest as dg
from skillopt_ray.sleep.harvest.digest import DigestBuilder, SessionDigest
from skillopt_ray.sleep.harvest.redact import Redactor

# (what is planted, the part that must not survive)
NEW = {
    "aws_secret": (
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    ),
    "key_base": ("SECRET_KEY_BASE=4f9a2b7c1d8e3f6a0b5c9d2e7f1a4b8c", "4f9a2b7c1d8e3f6a0b5c9d2e7f1a4b8c"),
    "app_secret": ("export MY_APP_SECRET_VALUE=Zq8Wm3Kt7Rp2Lx9Vn4", "Zq8Wm3Kt7Rp2Lx9Vn4"),
    "password_flag": ("deploy --password Hunter2IsNotAGoodOne", "Hunter2IsNotAGoodOne"),
    "password_eq": ("deploy --password=Hunter3IsNotAGoodOne", "Hunter3IsNotAGoodOne"),
    "mysql_p": ("mysql -u root -p Sup3rS3cretDbPass -h db", "Sup3rS3cretDbPass"),
    "mysql_p_glued": ("mysqldump -uroot -pGlu3dS3cretDbPass app", "Glu3dS3cretDbPass"),
}
PLANTED = {k: (v, _needles(v)[0]) for k, v in SECRETS.items()} | NEW
FRAG = 8


def fragments(secret: str) -> set[str]:
    return {secret[i : i + FRAG] for i in range(len(secret) - FRAG + 1)}


def leaked(text: str, secret: str) -> list[str]:
    return sorted(f for f in fragments(secret) if f in text)


def _at(planted: str, secret: str, kept: int, cut: int, head: bool) -> str:
    """A text whose cut at `cut` (its first `cut` characters when `head`, else its last) keeps `kept` characters
    of the secret, which is planted whole."""
    start = planted.index(secret)
    if head:  # the secret starts at cut - kept
        return "x" * (cut - kept - start - 1) + " " + planted + " tail of the text"
    # the text's last `cut` characters begin `kept` characters before the secret's end
    after = len(planted) - start - len(secret)  # what follows the secret in `planted`
    return "the start " + planted + " " + "y" * (cut - kept - after - 1)


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_every_split_of_a_secret_across_every_cut_leaves_no_fragment(kind):
    planted, secret = PLANTED[kind]
    sites = [
        ("request", dg.MAX_TEXT, True),
        ("correction", dg.MAX_CORRECTION, True),
        ("command", dg.MAX_COMMAND, True),
        ("file", dg.MAX_COMMAND, True),
        ("reply", dg.MAX_TEXT, False),
        ("run", dg.MAX_COMMAND, True),
        ("corrected_reply", dg.MAX_TEXT, False),
    ]
    checked = 0
    for site, cut, head in sites:
        for kept in range(1, len(secret)):
            text = _at(planted, secret, kept, cut, head)
            b = DigestBuilder(SessionDigest("codex", "s", "p"), Redactor(("env-value-9f8e7d6c5b4a",)))
            if site == "request":
                b.user(text)
            elif site == "correction":
                b.user("first request")
                b.user("no, " + text[4:] if text.startswith("xxxx") else text)
            elif site == "command":
                b.tool("Bash", command=text)
            elif site == "file":
                b.tool("Read", file=text)
            elif site == "run":
                b.ran(text, True)
            elif site == "corrected_reply":
                b.user("first request")
                b.reply(text)
                b.user("no, that is wrong")
            else:
                b.reply(text)
            out = json.dumps(b.finish(__import__("collections").Counter()).summary())
            assert not leaked(out, secret), (kind, site, kept, leaked(out, secret))
            checked += 1
    assert checked == 7 * (len(secret) - 1)


def _sessions(ch: Path, cc: Path, project: Path, kept_of) -> None:
    for kind, (planted, secret) in sorted(PLANTED.items()):
        k = kept_of(secret)
        req = _at(planted, secret, k, dg.MAX_TEXT, True)
        reply = _at(planted, secret, k, dg.MAX_TEXT, False)
        cmd = _at(planted, secret, k, dg.MAX_COMMAND, True)
        call = {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
        extra = ({"timestamp": "2020-01-01T10:00:00.000Z", "type": "response_item", "payload": call},)
        codex_session(ch, str(project), [f"{kind}: " + req, "no, " + req], replies=(reply,), extra=extra)
        tool = {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": cmd}}
        bash = {
            "sessionId": "x",
            "cwd": str(project),
            "type": "assistant",
            "timestamp": "2020-01-01T10:00:00.000Z",
            "message": {"role": "assistant", "content": [tool]},
        }
        claude_session(cc, str(project), [f"{kind}: " + req, "no, " + req], replies=(reply,), extra=(bash,))


@pytest.mark.parametrize("kept", ["short", "half", "most"])
def test_no_fragment_of_a_split_secret_is_written_or_sent_to_the_miner(tmp_path, capsys, monkeypatch, kept):
    monkeypatch.setenv("COMPATIBLE_API_KEY", "test-key-not-secret")
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRETS["environment_value"])
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    project.mkdir()
    pick = {"short": lambda s: FRAG, "half": lambda s: len(s) // 2, "most": lambda s: len(s) - 1}[kept]
    _sessions(ch, cc, project, pick)

    def echo(body, headers):  # the model repeats the digest's requests as tasks
        user = body["messages"][1]["content"]
        data = json.loads(user.split("\n", 2)[2].rsplit("\nSESSION ", 1)[0])
        return json.dumps([{"prompt": r, "kind": "chat"} for r in data["requests"][:1]])

    argv = [
        "harvest", "--project", str(project), "--codex-home", str(ch), "--claude-home", str(cc), "--lookback",
        "all", "--json", "llm=compatible",
    ]  # fmt: skip
    with ScriptedServer(policy=echo) as srv:
        assert main([*argv, f"llm.base_url={srv.base_url}"]) == 0
        bodies = [json.dumps(b) for b in srv.state.bodies]
    report = json.loads(capsys.readouterr().out)
    assert len(bodies) == 2 * len(PLANTED) and report["tasks_new"] >= len(PLANTED)
    files = [p.read_bytes().decode("utf-8", "replace") for p in (project / ".skillopt").rglob("*") if p.is_file()]
    for kind, (_, secret) in PLANTED.items():
        for b in bodies:
            assert not leaked(b, secret), (kind, "sent", leaked(b, secret))
        for f in files:
            assert not leaked(f, secret), (kind, "written", leaked(f, secret))


def test_a_secret_the_model_writes_across_the_prompt_or_rubric_cut_is_not_written(tmp_path, capsys, monkeypatch):
    from skillopt_ray.sleep.harvest.tasks import MAX_PROMPT, MAX_RUBRIC

    monkeypatch.setenv("COMPATIBLE_API_KEY", "test-key-not-secret")
    project, ch, cc = tmp_path / "proj", tmp_path / "codex", tmp_path / "claude"
    project.mkdir()
    codex_session(ch, str(project), ["Tidy the deploy script please"])
    planted, secret = PLANTED["openai_key"]
    reply = [
        {
            "prompt": "Deploy it " + _at(planted, secret, len(secret) // 2, MAX_PROMPT - 10, True),
            "kind": "chat",
            "rubric": _at(planted, secret, len(secret) // 2, MAX_RUBRIC, True),
        }
    ]
    argv = [
        "harvest", "--project", str(project), "--codex-home", str(ch), "--claude-home", str(cc), "--lookback",
        "all", "--json", "llm=compatible",
    ]  # fmt: skip
    with ScriptedServer(policy=lambda body, headers: json.dumps(reply)) as srv:
        assert main([*argv, f"llm.base_url={srv.base_url}"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks_new"] == 1
    for p in (project / ".skillopt").rglob("*"):
        if p.is_file():
            assert not leaked(p.read_text("utf-8", "replace"), secret), p


def test_ordinary_text_near_the_new_patterns_is_left_alone():
    r = Redactor()
    for text in (
        "set max_tokens=100 and keyboard_layout=us",
        "psql -h db -p 5432 -U app",
        "mysql -u root -p -h db app",
        "cd $PWD && make",
    ):
        assert r(text) == text, text
    assert not r.counts


def test_codex_messages_held_in_case_a_log_has_no_user_events_count_only_when_used(tmp_path):
    """Codex logs a user's words as an event and, again, as a model-facing message (held in case the log has no
    events): the second copy's redactions are counted only when it is used."""
    from skillopt_ray.sleep.harvest.sources import codex

    project = tmp_path / "proj"
    project.mkdir()
    key = PLANTED["openai_key"][0]
    msg = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Deploy with " + key}]}
    held = ({"timestamp": "2020-01-01T10:00:00.000Z", "type": "response_item", "payload": msg},)
    both = codex_session(tmp_path / "c1", str(project), ["Deploy with " + key], extra=held)
    r = Redactor()
    d = codex.parse(both, r, lambda cwd: True)
    assert d is not None and r.counts["openai_key"] == 1  # the event's copy only
    only = codex_session(tmp_path / "c2", str(project), [], extra=held)
    r = Redactor()
    d = codex.parse(only, r, lambda cwd: True)
    assert d is not None and d.requests and "[REDACTED:openai_key]" in d.requests[0] and r.counts["openai_key"] == 1
