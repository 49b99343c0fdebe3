"""Your own tasks tried as an attacker would: links planted in an agent task's workspace/, check scripts whose output
tries to pass for something else."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path

import pytest
import skillopt_envs
from custom_helpers import CTX, FakeLLM
from skillopt_envs.base import AgentOutcome, AgentTask, EpisodeContext
from skillopt_envs.custom.check import make_sandbox, run_check, verdict
from skillopt_envs.kit import SPLITS


def _agent_tasks(root: Path, check_body: str) -> Path:
    """Three agent task folders (one per split) whose workspace/ holds a real file and links out of the folder."""
    secret = root.parent / "secret.txt"
    secret.write_text("TOP-SECRET")
    for name, split in (("a", "train"), ("b", "val"), ("c", "test")):
        ws = root / name / "workspace"
        (ws / "sub").mkdir(parents=True)
        (root / name / "task.md").write_text("Do the chore.")
        (root / name / "task.json").write_text(json.dumps({"split": split}))
        (ws / "real.txt").write_text("mine")
        (ws / "passwd").symlink_to("/etc/passwd")
        (ws / "sub" / "outside.txt").symlink_to(secret)
        (ws / "etc").symlink_to("/etc", target_is_directory=True)
        check = root / name / "check"
        check.write_text(check_body)
        check.chmod(0o755)
    return root


# the check passes only when the workspace holds real.txt and none of the planted links' targets
_NO_LINKS = (
    '#!/bin/sh\nls -RA "$2" >&2\n'
    'test -f "$2/real.txt" || exit 1\n'
    'for p in passwd sub/outside.txt etc; do test -e "$2/$p" && exit 1; done\n'
    'grep -rq -e TOP-SECRET -e "root:" "$2" && exit 1\nexit 0\n'
)


@pytest.mark.usefixtures("needs_bwrap")
def test_links_in_an_agent_tasks_workspace_are_not_copied_through_for_a_chat_target(tmp_path):
    b = skillopt_envs.make("custom", {"data_dir": str(_agent_tasks(tmp_path / "tasks", _NO_LINKS)), "options": {}})
    r = asyncio.run(b.run_episode(b.load_split("train")[0], "", FakeLLM("done"), CTX))
    assert r.scored and r.hard == 1.0, r.trajectory[-1]["content"]


class RecordingRunner:
    """A stand-in agent runner: records the files it was asked to copy in and leaves the workspace as it is."""

    trace_to_optimizer = False

    def __init__(self) -> None:
        self.tasks: list[AgentTask] = []

    async def run(self, task: AgentTask, key: str) -> AgentOutcome:
        self.tasks.append(task)
        ws = Path(str(task.workspace))
        for rel, src in task.files.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_bytes(Path(src).read_bytes())
        return AgentOutcome("done", "SKILL")


@pytest.mark.usefixtures("needs_bwrap")
def test_links_in_an_agent_tasks_workspace_are_not_handed_to_the_agent(tmp_path):
    b = skillopt_envs.make("custom", {"data_dir": str(_agent_tasks(tmp_path / "tasks", _NO_LINKS)), "options": {}})
    runner = RecordingRunner()
    ctx = EpisodeContext("t/e1", True, 1, 0, agent=runner)
    r = asyncio.run(b.run_episode(b.load_split("train")[0], "", FakeLLM("unused"), ctx))
    assert sorted(runner.tasks[0].files) == ["real.txt"]
    assert r.scored and r.hard == 1.0, r.trajectory[-1]["content"]


# ---------- what a check prints ----------


def _verdict(stdout: str, returncode: int = 0, stderr: str = ""):
    return verdict(returncode, False, stdout, stderr, f"exit status {returncode}", stdout)


def test_a_check_that_relays_a_traceback_on_stderr_and_exits_0_still_scores():
    """A check that runs the reply and lets the reply's traceback through to stderr has not crashed: a reply must not
    be able to turn its own failure into a data error (left out of the scores) by raising."""
    tb = 'Traceback (most recent call last):\n  File "solution.py", line 1\nZeroDivisionError: division by zero\n'
    out = _verdict("0 of 3 tests passed\n0\n", 0, tb)
    assert not out.broken and out.value == 0.0
    crashed = _verdict("", 1, tb)  # the check's own uncaught exception: Python exits with status 1
    assert crashed.broken and "crashed" in crashed.reason


@pytest.mark.parametrize("printed", ["0_1", "\u0661", "0x1", "infinity", "nan", "1e309", "1/2"])
def test_a_score_is_a_plain_decimal_number(printed):
    out = _verdict(f"{printed}\n")
    assert out.broken, f"{printed!r} scored {out.value}"


@pytest.mark.parametrize("printed,value", [("-0", 0.0), ("+1", 1.0), (".5", 0.5), ("5e-1", 0.5), ("1.", 1.0)])
def test_plain_decimal_scores_read_as_numbers(printed, value):
    out = _verdict(f"looking\n{printed}  \n")
    assert out.value == value and math.copysign(1.0, out.value) == 1.0 and f"printed {value:g}" in out.reason


def test_a_workspace_folder_that_is_a_link_is_refused_when_the_tasks_are_read(tmp_path):
    root = _agent_tasks(tmp_path / "tasks", _NO_LINKS)
    ws = root / "b" / "workspace"
    ws.rename(root / "b" / "elsewhere")
    ws.symlink_to("/etc", target_is_directory=True)
    b = skillopt_envs.make("custom", {"data_dir": str(root), "options": {}})
    with pytest.raises(skillopt_envs.DataError, match="workspace is a link; make it a real folder"):
        b.preflight(["train"])


@pytest.mark.usefixtures("needs_bwrap")
@pytest.mark.parametrize(
    "name,body",
    [
        ("check.py", "import os, signal\nprint(1.0, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n"),
        ("check", "#!/bin/sh\necho 1\nkill -TERM $$\n"),
    ],
    ids=["python", "shell"],
)
def test_a_check_killed_by_a_signal_after_printing_a_score_is_broken_not_a_crash_of_the_run(tmp_path, name, body):
    check = tmp_path / name
    check.write_text(body)
    check.chmod(0o755)
    out = run_check(make_sandbox("bwrap", 20.0), check, {"id": "t"}, "reply", None)
    assert out.broken and not out.infra and "signal SIG" in out.reason, out.reason


# ---------- a new user's slips ----------


@pytest.mark.parametrize(
    "options,said",
    [
        ({"check_timeout_s": "abc"}, "env.options.check_timeout_s='abc' is not a number; give e.g."),
        ({"hard_at": True}, "env.options.hard_at=True is not a number"),
        ({"split_seed": 1.5}, "env.options.split_seed=1.5 is not a whole number"),
        ({"scorer": 3}, "env.options.scorer=3 is not a string"),
    ],
)
def test_an_option_of_the_wrong_type_is_one_line_naming_it(tmp_path, options, said):
    data = tmp_path / "t.jsonl"
    data.write_text('{"id": "a", "prompt": "p", "answer": "x"}\n')
    with pytest.raises(skillopt_envs.DataError, match=re.escape(said)):
        skillopt_envs.make("custom", {"data_dir": str(data), "options": options})


def test_a_task_file_saved_with_a_byte_order_mark_reads(tmp_path):
    data = tmp_path / "t.jsonl"
    rows = [json.dumps({"id": i, "prompt": "p", "answer": "x", "split": s}) for i, s in enumerate(SPLITS)]
    data.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(rows).encode() + b"\r\n")
    b = skillopt_envs.make("custom", {"data_dir": str(data), "options": {}})
    assert [t.task_id for t in b.load_split("train")] == ["0"]


def test_a_check_that_is_a_folder_is_named_as_one(tmp_path):
    data = tmp_path / "t.jsonl"
    data.write_text('{"id": "a", "prompt": "p", "split": "train"}\n')
    b = skillopt_envs.make("custom", {"data_dir": str(data), "options": {"scorer": "script", "check": str(tmp_path)}})
    with pytest.raises(skillopt_envs.DataError, match="is a folder; give the script's own path"):
        b.preflight(["train"])


def test_an_agent_task_with_a_chat_target_is_not_asked_for_answer_tags_its_check_never_reads(tmp_path):
    """The whole reply lands in reply.txt for the task's check: asking for reasoning and <answer> tags (as for the
    exact_match scorer, the default) made a check comparing reply.txt with a word fail every right answer."""
    root = _agent_tasks(tmp_path / "tasks", '#!/bin/sh\ntest "$(cat "$2/reply.txt")" = "banana"\n')
    b = skillopt_envs.make("custom", {"data_dir": str(root), "options": {}})
    llm = FakeLLM("banana")
    asyncio.run(b.run_episode(b.load_split("train")[0], "", llm, CTX))
    system = llm.sent[0].messages[0]["content"]
    assert "<answer>" not in system and "Do the chore." in llm.sent[0].messages[1]["content"]
    assert "scored by each task's check" in b.data_note()


@pytest.mark.usefixtures("needs_bwrap")
def test_a_check_that_is_a_link_runs_the_script_it_names_and_a_dangling_one_is_refused(tmp_path):
    """A task folder's check may be a link to a shared script (the script's content is what runs in the sandbox); a
    link to nothing is refused before the run, naming it."""
    shared = tmp_path / "shared_check.sh"
    shared.write_text('#!/bin/sh\ntest -f "$2/real.txt" && echo 0.75\n')
    shared.chmod(0o755)
    root = _agent_tasks(tmp_path / "tasks", "")
    for name in ("a", "b", "c"):
        (root / name / "check").unlink()
        (root / name / "check").symlink_to(shared)
    b = skillopt_envs.make("custom", {"data_dir": str(root), "options": {}})
    r = asyncio.run(b.run_episode(b.load_split("train")[0], "", FakeLLM("done"), CTX))
    assert r.scored and r.soft == 0.75
    (root / "c" / "check").unlink()
    (root / "c" / "check").symlink_to(tmp_path / "gone.sh")
    with pytest.raises(skillopt_envs.DataError, match="has no check"):
        skillopt_envs.make("custom", {"data_dir": str(root), "options": {}}).preflight(["train"])


@pytest.mark.usefixtures("needs_bwrap")
@pytest.mark.parametrize("what", ["a 100 MB file", "5,000 files"])
def test_a_large_workspace_the_agent_left_is_checked_not_dropped(tmp_path, what):
    """The agent's jail allows more than the check sandbox's defaults (256 MB, files of 64 MB, 4,096 files): a
    workspace past those once made the check crash (a data error) or its sandbox fail to start (an infra error), so a
    model could drop a failed task from the scores by leaving a big file or an npm install behind."""
    ws = tmp_path / "ws"
    (ws / "many").mkdir(parents=True)
    (ws / "real.txt").write_text("mine")
    if what == "a 100 MB file":
        with open(ws / "big.bin", "wb") as f:
            f.truncate(100 * 1024 * 1024)
    else:
        for i in range(5000):
            (ws / "many" / f"{i}.txt").write_text("x")
    check = tmp_path / "check"
    check.write_text('#!/bin/sh\ntest -f "$2/real.txt" && echo 0.5\n')
    check.chmod(0o755)
    out = run_check(make_sandbox("bwrap", 60.0), check, {"id": "t"}, None, ws)
    assert out.value == 0.5, out.reason + out.output[-600:]
