"""The jail's copy-back survives any workspace and no command of the agent's can void its own episode: hard links
come back as links and sparse files by their data (a correct episode stays scored), an archive over its byte limit
is the agent's own episode (scored, with the reason), a launcher that cannot send the files back is a named infra
error, and the agent's commands can signal neither the CLI nor the launcher. Real Codex CLI and Claude Code in the
real jail, against a scripted model."""

from __future__ import annotations

import asyncio
import os
import re
import tempfile

import pytest
from conftest import need_bwrap, need_harness
from harness_helpers import HostileModel, _attempt, _hostile_run, _jail, _run, _settings, codex_noisy_commands

from skillopt_ray.harness.jail import JailLimits
from skillopt_ray.harness.runner import AgentSettings, HarnessError, _final_message, run_agent
from skillopt_ray.harness.skill_md import render_skill_md
from skillopt_ray.harness.workspace import WorkspaceSpec, prepare_workspace

MB = 1024 * 1024

LINKS_AND_HOLES = (
    "head -c 60M /dev/urandom > big && for i in 1 2 3 4 5; do ln big big$i; done && "
    "truncate -s 100M sparse.bin && printf tail >> sparse.bin && echo MADE"
)


@pytest.mark.parametrize("harness", ["codex", "claude_code"])
def test_hard_links_and_sparse_files_come_back_whole_and_the_episode_is_scored(tmp_path, monkeypatch, harness):
    """Six names of one 60 MB file and a 100 MB file that is all hole but four bytes: 460 MB read naively, past the
    archive's 297 MB limit for a 256 MB workspace, which voided a correct episode."""
    out, run, wd = _hostile_run(
        tmp_path, monkeypatch, LINKS_AND_HOLES, JailLimits(disk_mb=256, file_mb=128), harness=harness
    )
    assert "MADE" in out, out
    assert run.final_message == "<answer>done</answer>" and not run.jail_note
    big = (wd / "big").stat()
    assert big.st_size == 60 * MB and all((wd / f"big{i}").stat().st_ino == big.st_ino for i in range(1, 6))
    sparse = wd / "sparse.bin"
    assert sparse.stat().st_size == 100 * MB + 4 and sparse.stat().st_blocks * 512 < 4 * MB  # holes stay holes
    with open(sparse, "rb") as f:
        f.seek(100 * MB - 4)
        assert f.read() == b"\0\0\0\0tail"


def test_an_archive_over_its_limit_is_the_agents_own_episode_scored_with_the_reason(tmp_path, monkeypatch):
    """1,700 empty files at the end of 3,700-character paths: a header of 5 KB each passes the archive's limit
    for a 4 MB workspace. What fits comes back, the episode is scored and says where it stopped (before, the
    launcher died at the limit and a correct episode was voided)."""
    script = (
        "python3 -c \"import os; d = '/'.join(['d' * 250] * 15); os.makedirs(d); "
        "[open(os.path.join(d, 'f%04d' % i), 'w').close() for i in range(1700)]; print('MADE')\""
    )
    out, run, wd = _hostile_run(tmp_path, monkeypatch, script, JailLimits(disk_mb=4, disk_files=2000))
    assert "MADE" in out, out
    assert run.final_message == "<answer>done</answer>"  # codex_last_message.txt came back before the long paths
    assert "export limit" in run.jail_note and "NOTE: the agent's files passed" in run.summary
    deep = wd.joinpath(*["d" * 250] * 15)
    assert 0 < len(os.listdir(deep)) <= 1700  # the copy stops in the workspace or, as here, the home


def test_a_launcher_that_cannot_send_the_files_back_is_a_named_infra_error(tmp_path):
    run = _attempt("codex", codex_noisy_commands())
    run.result.exported = False
    run.result.export_problem = "cannot send the agent's files back: OSError: [Errno 27] File too large"
    (tmp_path / "codex_last_message.txt").write_text("<answer>B</answer>")
    with pytest.raises(
        HarnessError, match="could not send the codex agent's files back: cannot send .* too large"
    ) as e:
        _final_message(_settings("codex"), run, tmp_path)
    assert e.value.kind == "jail_export"
    run.result.timed_out = True  # the host ended the jail at its time limit: a timeout, as before
    with pytest.raises(HarnessError) as e:
        _final_message(_settings("codex"), run, tmp_path)
    assert e.value.kind == "timeout"


def test_the_cli_exit_status_is_its_own_not_the_launchers(tmp_path):
    jail, ws = _jail(tmp_path, JailLimits(disk_mb=64, file_mb=32))
    r = _run(jail, ws, "head -c 20M /dev/zero > a && for i in 1 2 3 4; do ln a a$i; done; exit 3")
    assert r.returncode == 3 and r.exported and (ws / "a4").stat().st_ino == (ws / "a").stat().st_ino


KILLS = (
    "L=$(for c in /proc/[0-9]*/cmdline; do grep -qs 'MS_NOSUI[D]' $c && echo $c; done | cut -d/ -f3 | sort -n | head -1); "
    "echo LAUNCHER=$L; kill -0 $L && echo LAUNCHER-SIGNALABLE; "
    "(kill -9 $L; kill -9 1; kill -INT 1; kill -TERM 1) 2>&1; "
    "echo AFTER"
)
ENDS_THE_CLI = "pkill -9 node; pkill -9 codex; pkill -9 claude; sleep 1"


@pytest.mark.parametrize("harness", ["codex", "claude_code"])
def test_the_agents_commands_cannot_end_the_launcher_or_the_init(tmp_path, monkeypatch, harness):
    """`kill -0`/`kill -9` of the launcher and `kill -9`/`-INT`/`-TERM` of pid 1 (the jail's init): neither is
    reached, the CLI lives on, answers, and the episode is scored."""
    out, run, _ = _hostile_run(tmp_path, monkeypatch, KILLS, JailLimits(), harness=harness)
    assert "LAUNCHER=" in out and "LAUNCHER-SIGNALABLE" not in out and "AFTER" in out, out
    assert run.final_message == "<answer>done</answer>" and run.attempts == 1, out


@pytest.mark.parametrize("harness", ["codex", "claude_code"])
def test_a_cli_the_agent_kills_is_its_own_episode_scored(tmp_path, monkeypatch, harness):
    """`pkill -9` of the CLI itself (no longer pid 1: the init is): the agent ended its own run after it acted, so
    the episode is scored on what it left, here nothing (an empty reply, retried), never an infra error."""
    need_bwrap()
    need_harness("codex" if harness == "codex" else "claude")
    wd = tmp_path / "ws"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="t"))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.mkdtemp(prefix="jk-"))  # short: the socket path lies under it
    model = HostileModel(ENDS_THE_CLI, harness)
    run = asyncio.run(run_agent(model, AgentSettings(harness, "m", 60.0), wd, "go", "k"))
    assert run.final_message == "" and run.attempts == 2


def test_a_codex_the_agent_interrupts_is_the_agents_episode_scored(tmp_path, monkeypatch):
    """SIGINT is the one signal Codex handles by ending its turn (exit status 1). Only a command of the agent's can
    send it (the jail ends the CLI with SIGKILL): the episode is scored on what the agent left, here nothing
    (before, `pkill -INT codex` turned it into an unscored infra error)."""
    need_bwrap()
    need_harness("codex")
    wd = tmp_path / "ws"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="t"))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.mkdtemp(prefix="jc-"))  # short: the socket path lies under it
    model = HostileModel("pkill -INT codex; kill -INT 1; sleep 1")
    run = asyncio.run(run_agent(model, AgentSettings("codex", "m", 60.0), wd, "go", "k"))
    assert run.final_message == "" and run.attempts == 2  # retried as an empty reply, then scored


def test_ps_in_the_agents_commands_lists_the_cli_and_their_own_processes(tmp_path, monkeypatch):
    """The commands' PID namespace has its own /proc: `ps` works there (procps looks itself up by its own pid) and
    shows the CLI as pid 1, never the launcher or the forwarder."""
    out, run, _ = _hostile_run(tmp_path, monkeypatch, "ps -eo pid,args; echo PS-RC=$?", JailLimits())
    assert "PS-RC=0" in out and "fatal" not in out, out
    assert re.search(r"^\s*1 .*codex", out, re.M) and "forwarder.js" not in out and "MS_NOSUID" not in out, out
    assert run.final_message == "<answer>done</answer>"
