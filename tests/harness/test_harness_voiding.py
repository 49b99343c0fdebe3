"""No command of the agent's voids its own episode: once the gateway (outside the jail) has answered with a tool
call, a CLI that died, ran out of time or memory, lost its answer file, or whose files the launcher could not send
back is scored on what it left; only evidence outside the agent's reach (the host's own failure, a failure before
the agent's first command) is an infra error. Unit checks of the runner's verdict, and the real Codex CLI in the
real jail against agents that lock or replace its answer file."""

from __future__ import annotations

import asyncio
import os
import tempfile

import pytest
from conftest import need_bwrap, need_harness
from harness_helpers import HostileModel, _attempt, _codex_item, _settings, codex_noisy_commands

from skillopt_ray.harness.runner import AgentSettings, HarnessError, _final_message, run_agent
from skillopt_ray.harness.skill_md import render_skill_md
from skillopt_ray.harness.workspace import WorkspaceSpec, prepare_workspace
from skillopt_ray.llm.agent_api import CallRecord


def _acted(harness="codex", **kw):
    run = _attempt(harness, codex_noisy_commands() if harness == "codex" else [], **kw)
    run.calls = [
        CallRecord("responses", 5, 5, False, ["exec_command"], text=""),
        CallRecord("responses", 5, 2, False, [], text="<answer>B</answer>"),
    ]
    return run


@pytest.mark.parametrize(
    "fault",
    [{"rc": 3}, {"rc": 137}, {"oom": True}, {"timed_out": True}],
)
def test_a_codex_that_dies_after_the_agent_acted_is_scored_on_what_the_model_said(tmp_path, fault):
    assert _final_message(_settings("codex"), _acted(**fault), tmp_path) == "<answer>B</answer>"


@pytest.mark.parametrize("kind", ["folder", "symlink", "fifo", "unreadable"])
def test_a_replaced_or_locked_answer_file_falls_back_to_the_gateways_record(tmp_path, kind):
    last = tmp_path / "codex_last_message.txt"
    secret = tmp_path / "elsewhere.txt"
    secret.write_text("<answer>planted</answer>")
    if kind == "folder":
        last.mkdir()
    elif kind == "symlink":
        last.symlink_to(secret)
    elif kind == "fifo":
        os.mkfifo(last)  # reading it would block for ever
    else:
        last.write_text("<answer>A</answer>")
        last.chmod(0)
    run = _acted(rc=1)
    got = _final_message(_settings("codex"), run, tmp_path)
    assert got in ("<answer>B</answer>", "<answer>A</answer>") and "planted" not in got
    if kind != "unreadable" or os.geteuid() != 0:  # root reads a 000 file: the file is still the agent's answer
        assert got == "<answer>B</answer>"


def test_a_file_the_cli_wrote_is_still_the_answer(tmp_path):
    (tmp_path / "codex_last_message.txt").write_text("<answer>C</answer>")
    assert _final_message(_settings("codex"), _acted(rc=3), tmp_path) == "<answer>C</answer>"


def test_a_launcher_export_failure_after_the_agent_acted_is_scored_and_a_host_failure_is_not(tmp_path):
    run = _acted()
    run.result.exported, run.result.export_problem = False, "cannot send the agent's files back: RecursionError"
    assert _final_message(_settings("codex"), run, tmp_path) == "<answer>B</answer>"
    run.result.export_host_fault = True
    run.result.export_problem = "the host could not unpack them (x: No space left on device)"
    with pytest.raises(HarnessError, match="No space left") as e:
        _final_message(_settings("codex"), run, tmp_path)
    assert e.value.kind == "jail_export"


def test_before_the_agent_acted_a_failure_is_still_the_infrastructures(tmp_path):
    run = _attempt("codex", codex_noisy_commands(), rc=3)  # the gateway answered, never with a tool call
    with pytest.raises(HarnessError, match="exit code 3"):
        _final_message(_settings("codex"), run, tmp_path)


LOCKS = {
    "chmod": "chmod 000 /workspace",
    "folder": "rm -f codex_last_message.txt; mkdir codex_last_message.txt",
    "symlink": "rm -f codex_last_message.txt; ln -s /etc/passwd codex_last_message.txt",
    "fifo": "rm -f codex_last_message.txt; mkfifo codex_last_message.txt",
}


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_an_agent_that_locks_codexs_answer_file_is_scored_not_voided(tmp_path, monkeypatch, lock):
    need_bwrap()
    need_harness("codex")
    wd = tmp_path / "ws"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="t"))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.mkdtemp(prefix="jv-"))  # short: the socket path lies under it
    model = HostileModel(LOCKS[lock])
    run = asyncio.run(run_agent(model, AgentSettings("codex", "m", 60.0), wd, "go", "k"))
    assert run.final_message == "<answer>done</answer>" and run.attempts == 1


ATTACH = (
    'python3 -c "import ctypes, subprocess; libc = ctypes.CDLL(None, use_errno=True); '
    "pid = int(subprocess.run(['pgrep', '-x', 'codex'], capture_output=True, text=True).stdout.split()[0]); "
    "r = libc.ptrace(16, pid, 0, 0); print('ATTACH', r, ctypes.get_errno())\""
)


def test_no_command_can_attach_to_codex(tmp_path, monkeypatch):
    """A command that attaches to Codex (to inject an exit of its choosing) is refused: EPERM; Codex answers."""
    need_bwrap()
    need_harness("codex")
    wd = tmp_path / "ws"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="t"))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.mkdtemp(prefix="jp-"))  # short: the socket path lies under it
    model = HostileModel(ATTACH)
    run = asyncio.run(run_agent(model, AgentSettings("codex", "m", 60.0), wd, "go", "k"))
    assert "ATTACH -1 1" in model.output, model.output
    assert run.final_message == "<answer>done</answer>" and run.attempts == 1


def test_a_session_log_rewritten_to_show_broken_tools_does_not_void_when_the_gateway_saw_a_process_run(tmp_path):
    """The session log lives in the agent's home: a command can rewrite it to show only failed spawns. The tool
    results the CLI sent back through the gateway are outside its reach: one that says a process ran wins."""
    spawn_fail = "Failed to create unified exec process: No such file or directory (os error 2)"
    forged = [_codex_item("c0", "ls", spawn_fail, -1, pid=None)]
    run = _attempt("codex", forged)
    with pytest.raises(HarnessError, match="tools were broken"):
        _final_message(_settings("codex"), run, tmp_path)
    run.process_ran = True
    (tmp_path / "codex_last_message.txt").write_text("<answer>B</answer>")
    assert _final_message(_settings("codex"), run, tmp_path) == "<answer>B</answer>"
