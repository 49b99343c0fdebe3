"""The night's rules as a marked block of AGENTS.md / CLAUDE.md (issue 43): only the block's inside is ever written,
every other byte stays; the block is staged pinned, applied by `adopt`, restored by `adopt --undo`, shown by
`status`; markers a person could mean as text (inside a code fence) or that are doubled are refused, not guessed."""

from __future__ import annotations

import json

import pytest
from sleep_fixtures import propose

from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.proposal import memory
from skillopt_ray.sleep.proposal.staging import stage_night

B, E = memory.begin_marker("deploy"), memory.end_marker("deploy")
HEAD = "# Our rules\r\n\r\nUse tabs.\r\n"  # CRLF and no UTF-8 trouble: the bytes outside the block must survive
TAIL = "\n## After\n\nKeep this   trailing space \n"


def test_a_new_block_is_appended_after_the_untouched_text():
    out = memory.propose(HEAD, "deploy", "- run make test first\n- then make deploy")
    assert out.startswith(HEAD)
    assert out[len(HEAD) :] == f"\r\n{B}\r\n- run make test first\r\n- then make deploy\r\n{E}\r\n"
    assert memory.block_text(out, "deploy") == "- run make test first\r\n- then make deploy\r\n"
    assert memory.propose("", "deploy", "x") == f"{B}\nx\n{E}\n"
    assert memory.propose("no newline", "deploy", "x") == f"no newline\n\n{B}\nx\n{E}\n"


def test_an_existing_block_is_replaced_and_everything_around_it_kept_byte_for_byte():
    live = f"# top\n\n{B}\nold rule\n{E}{TAIL}"
    out = memory.propose(live, "deploy", "new rule 1\nnew rule 2\n")
    assert out == f"# top\n\n{B}\nnew rule 1\nnew rule 2\n{E}{TAIL}"
    assert memory.propose(out, "deploy", "old rule") == live  # replace back: the same bytes
    other = f"{memory.begin_marker('other')}\nmine\n{memory.end_marker('other')}\n"
    assert memory.propose(other, "deploy", "x").startswith(other)  # another skill's block is not ours


@pytest.mark.parametrize(
    ("live", "match"),
    [
        (f"# doc\n```md\n{B}\nexample\n{E}\n```\n", "inside a code fence"),
        (f"~~~\n{B}\n~~~\n{E}\n", "inside a code fence"),
        (f"{B}\na\n{E}\n{B}\nb\n{E}\n", "2 begin and 2 end"),
        (f"{B}\na\n", "1 begin and 0 end"),
        (f"{E}\na\n{B}\n", "comes before"),
    ],
)
def test_markers_in_a_fence_doubled_or_unpaired_are_refused(live, match):
    with pytest.raises(memory.MemoryRefused, match=match):
        memory.propose(live, "deploy", "x")


def test_a_fenced_marker_after_the_fence_closes_is_a_real_block():
    live = f"```\ncode\n```\n{B}\nold\n{E}\n"
    assert memory.propose(live, "deploy", "new") == f"```\ncode\n```\n{B}\nnew\n{E}\n"


def test_each_cli_has_its_memory_file_and_chat_is_refused(tmp_path):
    assert memory.memory_path(tmp_path, "codex") == tmp_path / "AGENTS.md"
    assert memory.memory_path(tmp_path, "claude_code") == tmp_path / "CLAUDE.md"
    with pytest.raises(ValueError, match="--memory needs --target codex or claude_code"):
        memory.memory_path(tmp_path, "chat")


def test_run_refuses_memory_for_chat_and_bad_markers_before_the_night(tmp_path, capsys):
    (tmp_path / "AGENTS.md").write_text(f"{B}\n{B}\n{E}\n")
    for target, want in (("chat", "--memory needs --target"), ("codex", "2 begin and 1 end")):
        code = main(["run", "--project", str(tmp_path), "--target", target, "--memory", "--name", "deploy"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and want in err and "\n" not in err
    own = tmp_path / "SKILL.md"  # with --skill the block is named by its front matter, not by --name
    own.write_text("---\nname: deploy\ndescription: d\n---\n\nbody\n")
    assert main(["run", "--project", str(tmp_path), "--target", "codex", "--memory", "--skill", str(own)]) == 2
    assert "2 begin and 1 end" in capsys.readouterr().err
    assert not (tmp_path / ".skillopt" / "staging").exists()


def test_staged_block_is_adopted_undone_byte_identical_and_shown_by_status(tmp_path, proj, capsys):
    live = proj / "CLAUDE.md"
    original = (HEAD + f"\r\n{B}\r\nold\r\n{E}\r\n" + TAIL).encode()
    live.write_bytes(original)
    text, path = memory.proposal(proj, "claude_code", "deploy", "Run make test, then make deploy.")
    stage_night(propose(tmp_path, proj, "20261128T041500Z", memory=(text, path)))
    capsys.readouterr()
    assert main(["status", "--project", str(proj)]) == 0
    assert f"memory {live}: block 'deploy', 1 lines" in capsys.readouterr().out
    assert main(["status", "--project", str(proj), "--json"]) == 0
    assert "CLAUDE.md" in json.loads(capsys.readouterr().out)["nights"][0]["memory"]
    assert main(["adopt", "--project", str(proj)]) == 0
    assert live.read_bytes() == original.replace(b"\r\nold\r\n", b"\r\nRun make test, then make deploy.\r\n")
    assert main(["adopt", "--project", str(proj), "--undo"]) == 0
    assert live.read_bytes() == original


def test_a_memory_file_edited_after_staging_is_refused_and_left_alone(tmp_path, proj, capsys):
    live = proj / "AGENTS.md"
    live.write_text("# mine\n")
    stage_night(propose(tmp_path, proj, "20261128T041500Z", memory=memory.proposal(proj, "codex", "deploy", "r")))
    live.write_text("# mine, edited since\n")
    assert main(["adopt", "--project", str(proj)]) == 2
    assert "AGENTS.md" in capsys.readouterr().err
    assert live.read_text() == "# mine, edited since\n"
