"""An agent episode is an infra error only on structural signals: the jail's and the CLI's exit status, the time
and memory limits, whether the CLI started (its session log) and reached its model, and the CLIs' own event
kinds. What a command prints, or its exit code, is the model's observation and the episode stays scored.

The fast tests read event streams recorded from the pinned CLIs (Codex 0.171.0, Claude Code 2.1.197) in the jail;
the slow ones drive both real CLIs through a benchmark against a scripted model."""

from __future__ import annotations

import re

import pytest
from harness_helpers import (
    PS_OUT,
    WORDS,
    _attempt,
    _codex_item,
    _settings,
    codex_noisy_commands,
)

from skillopt_ray.harness import trace
from skillopt_ray.harness.runner import (
    HarnessError,
    _final_message,
    codex_sandbox_problem,
)

SPAWN_FAIL = "Failed to create unified exec process: No such file or directory (os error 2)"


def claude_noisy_commands() -> list[dict]:
    """The same three commands as Claude Code 2.1.197 logs them: `false` is an is_error result ("Exit code 1")."""
    ev: list[dict] = []
    for n, (cmd, result) in enumerate(
        [
            ("ps aux", {"content": PS_OUT, "is_error": False}),
            (WORDS, {"content": "seccomp bwrap: execution error", "is_error": False}),
            ("false", {"content": "Exit code 1", "is_error": True}),
            (
                "echo bwrap: seccomp execution error >&2; exit 3",
                {"content": "Exit code 3\nbwrap: seccomp execution error", "is_error": True},
            ),  # fmt: skip
        ]
    ):
        use = {"type": "tool_use", "id": f"c{n}", "name": "Bash", "input": {"command": cmd, "description": "x"}}
        ev.append({"type": "assistant", "message": {"id": f"msg_{n}", "role": "assistant", "content": [use],
                                                    "usage": {"input_tokens": 5, "output_tokens": 2}}})  # fmt: skip
        res = {"type": "tool_result", "tool_use_id": f"c{n}", **result}
        err = "Error: " + result["content"] if result["is_error"] else {"stdout": result["content"], "stderr": ""}
        ev.append({"type": "user", "message": {"role": "user", "content": [res]}, "toolUseResult": err})
    return ev


# ---------- the session logs, read by event kind ----------


def test_codex_commands_that_print_alarming_words_or_exit_non_zero_are_not_tool_errors():
    t = trace.codex_session_trace(codex_noisy_commands(), "/workspace")
    assert t.commands == ["ps aux", WORDS, "false"]
    assert t.tool_errors == [] and t.processes_started == 3
    assert trace.broken_tools(t) is None


def test_codex_shell_that_never_starts_a_process_in_the_workspace_is_broken():
    """Recorded from Codex when its shell tool cannot create a process: no process id, exit code -1."""
    ev = [_codex_item(f"c{i}", "ls", SPAWN_FAIL, -1, pid=None) for i in range(2)]
    t = trace.codex_session_trace(ev, "/workspace")
    assert t.processes_started == 0 and len(t.tool_errors) == 2
    why = trace.broken_tools(t)
    assert why is not None and "no shell command could start a process (2 tried" in why and "os error 2" in why


def test_codex_one_started_process_proves_the_tools_work():
    ev = [_codex_item("c0", "ls", SPAWN_FAIL, -1, pid=None), _codex_item("c1", "false", "", 1)]
    t = trace.codex_session_trace(ev, "/workspace")
    assert len(t.tool_errors) == 1 and t.processes_started == 1 and trace.broken_tools(t) is None


def test_codex_a_folder_the_model_chose_that_does_not_exist_is_its_own_observation():
    ev = [_codex_item("c0", "ls", SPAWN_FAIL, -1, pid=None, cwd="file:///nonexistent/dir")]
    t = trace.codex_session_trace(ev, "/workspace")
    assert t.tool_errors == [] and trace.broken_tools(t) is None


def test_codex_error_events_are_read_as_the_clis_own_errors():
    ev = [{"type": "event_msg", "payload": {"type": "error", "message": "stream disconnected before completion"}}]
    assert trace.codex_session_trace(ev).cli_errors == ["stream disconnected before completion"]


def test_claude_results_that_print_alarming_words_or_exit_non_zero_are_observations():
    t = trace.claude_session_trace(claude_noisy_commands())
    assert len(t.commands) == 4 and t.tool_errors == [] and trace.broken_tools(t) is None
    assert (t.input_tokens, t.output_tokens, t.usage_reports) == (20, 8, 4)


def test_the_analysts_trace_lists_no_tool_errors_for_noisy_commands():
    rendered = trace.codex_session_trace(codex_noisy_commands(), "/workspace").render()
    assert "- tool errors: none" in rendered and "ps aux" in rendered


# ---------- the runner's verdict on one attempt ----------


def test_codex_noisy_run_that_exits_zero_is_scored(tmp_path):
    (tmp_path / "codex_last_message.txt").write_text("<answer>B</answer>")
    run = _attempt("codex", codex_noisy_commands(), stdout="ERROR: seccomp\nexec failed", stderr="bwrap: x")
    assert _final_message(_settings("codex"), run, tmp_path) == "<answer>B</answer>"


def test_claude_noisy_run_that_exits_zero_is_scored(tmp_path):
    run = _attempt("claude_code", claude_noisy_commands(), stdout="<answer>B</answer>\n")
    assert _final_message(_settings("claude_code"), run, tmp_path) == "<answer>B</answer>"


def test_codex_broken_shell_tool_is_an_infra_error(tmp_path):
    run = _attempt("codex", [_codex_item("c0", "ls", SPAWN_FAIL, -1, pid=None)])
    with pytest.raises(HarnessError, match="tools were broken: no shell command could start a process") as e:
        _final_message(_settings("codex"), run, tmp_path)
    assert e.value.kind == "env"


def test_a_jail_that_never_started_the_cli_is_a_sandbox_start_error(tmp_path):
    run = _attempt("codex", [], rc=1, calls=0, started=False, stderr="bwrap: Can't mount proc on /newroot/proc\n")
    with pytest.raises(
        HarnessError,
        match="the codex CLI did not start in its jail \\(no session log, no model call: bwrap: Can't mount",
    ) as e:
        _final_message(_settings("codex"), run, tmp_path)
    assert e.value.kind == "sandbox_start"


def test_a_cli_that_started_but_never_called_its_model_is_an_infra_error(tmp_path):
    run = _attempt("claude_code", [{"type": "user", "message": {"role": "user", "content": "hi"}}], rc=1, calls=0,
                   stderr="Invalid API key\n")  # fmt: skip
    with pytest.raises(HarnessError, match="claude_code CLI started but never called its model \\(Invalid API key"):
        _final_message(_settings("claude_code"), run, tmp_path)


def test_the_memory_limit_and_the_codex_exit_status_are_infra_errors(tmp_path):
    with pytest.raises(HarnessError, match="memory limit"):
        _final_message(_settings("codex"), _attempt("codex", codex_noisy_commands(), oom=True), tmp_path)
    err = [{"type": "event_msg", "payload": {"type": "error", "message": "context window exceeded"}}]
    with pytest.raises(HarnessError, match="exit code 1: context window exceeded"):
        _final_message(_settings("codex"), _attempt("codex", err, rc=1), tmp_path)
    with pytest.raises(HarnessError, match="past its 60 s limit") as e:
        _final_message(_settings("codex"), _attempt("codex", [], timed_out=True), tmp_path)
    assert e.value.kind == "timeout"


def test_claude_non_zero_exit_with_a_reply_is_scored_and_without_one_is_retried(tmp_path):
    s = _settings("claude_code")
    assert _final_message(s, _attempt("claude_code", claude_noisy_commands(), rc=1, stdout="<answer>A</answer>"), tmp_path) == "<answer>A</answer>"  # fmt: skip
    assert _final_message(s, _attempt("claude_code", claude_noisy_commands(), rc=1), tmp_path) == ""


def test_codex_own_sandbox_inside_the_jail_is_refused_before_it_runs():
    from skillopt_envs.sandbox import userns_filter

    if userns_filter() is None:
        pytest.skip("no user-namespace filter on this architecture: the jail does not refuse Codex's sandbox")
    why = codex_sandbox_problem(_settings("codex", codex_sandbox="workspace-write"))
    assert why is not None and "codex_sandbox=danger-full-access" in why
    assert codex_sandbox_problem(_settings("codex")) is None  # danger-full-access: the jail is the sandbox
    assert codex_sandbox_problem(_settings("codex", codex_sandbox="workspace-write", jail="none")) is None
    assert codex_sandbox_problem(_settings("claude_code", codex_sandbox="read-only")) is None


# ---------- the stage an agent episode's calls are booked under ----------


def test_agent_stage_names_the_loop_stage_from_the_episode_key():
    from skillopt_ray.harness.runner import agent_stage

    assert agent_stage("train/e1s2/r1/task-3") == "rollout"
    assert agent_stage("eval/0123abcd/task-3/t1") == "validate"  # the gate's selection split, the test split
    assert agent_stage("slow/e2/prev/task-3") == "slow:rollout"
    assert agent_stage("meta/e2/topup4/curr/task-3") == "meta:rollout"
    assert agent_stage("evalonly/test/task-3") == "eval:test"
    assert agent_stage("my-own-key") == "rollout"


def test_a_cli_that_dies_before_its_session_in_the_real_jail_is_a_sandbox_start_error(tmp_path):
    """The structural marker with the real jail: a `codex` that exits 3 before writing a session log or calling
    its model (as a jail that cannot run it would) is a sandbox_start error naming what it said."""
    from conftest import need_bwrap
    from harness_helpers import start_error_without_model

    need_bwrap()
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    fake = prefix / "bin" / "codex"
    fake.write_text("#!/bin/sh\necho 'cannot load the sandbox runtime' >&2\nexit 3\n")
    fake.chmod(0o755)
    err = start_error_without_model(tmp_path, prefix)
    assert re.search("did not start in its jail .*cannot load the sandbox runtime", str(err)), err
    assert err.kind == "sandbox_start"
