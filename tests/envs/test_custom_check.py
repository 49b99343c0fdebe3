"""Check scripts of your own tasks, run in the sandbox: the score rule, broken checks as counted data errors (never a
0 that looks real), and the sandbox's walls (no network, nothing written outside, no keys)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import pytest
import skillopt_envs
from custom_helpers import CTX, FakeLLM, write_jsonl
from skillopt_envs.custom.check import make_sandbox, run_check

pytestmark = pytest.mark.usefixtures("needs_bwrap")


@pytest.fixture(scope="module")
def sandbox():
    return make_sandbox("bwrap", 30.0)


def check(tmp_path: Path, body: str, name: str = "check.py") -> Path:
    path = tmp_path / name
    path.write_text(body)
    path.chmod(0o755)
    return path


TASK = {"id": "t1", "prompt": "say hi", "answer": "hi"}


def test_a_python_check_reads_the_task_and_the_reply(sandbox, tmp_path):
    c = check(
        tmp_path,
        "import json, sys\ntask = json.load(open(sys.argv[1]))\nreply = open(sys.argv[2]).read()\n"
        "print('looking'); print(1.0 if task['answer'] in reply else 0.25)\n",
    )
    assert run_check(sandbox, c, TASK, "well hi there", None).value == 1.0
    out = run_check(sandbox, c, TASK, "hello", None)
    assert out.value == 0.25 and "looking" in out.output


def test_an_executable_check_scores_by_exit_status_when_it_prints_nothing(sandbox, tmp_path):
    c = check(tmp_path, '#!/bin/sh\ngrep -q hi "$2"\n', name="check")
    assert run_check(sandbox, c, TASK, "hi", None).value == 1.0
    assert run_check(sandbox, c, TASK, "bye", None).value == 0.0


@pytest.mark.parametrize(
    "body,said",
    [
        ("raise RuntimeError('boom')\n", "crashed"),
        ("print('all good, I think')\n", "is not a score"),
        ("print(1.5)\n", "outside [0, 1]"),
        ("import time\ntime.sleep(60)\n", "wall-clock"),
    ],
)
def test_a_broken_check_gives_no_score(tmp_path, body, said):
    out = run_check(make_sandbox("bwrap", 3.0), check(tmp_path, body), TASK, "hi", None)
    assert out.broken and said in out.reason


def test_the_check_has_no_network(sandbox, tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(5)
    port = srv.getsockname()[1]
    seen: list[bool] = []
    threading.Thread(target=lambda: seen.append(bool(_accept(srv))), daemon=True).start()
    c = check(
        tmp_path,
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print(1)\n"
        "except OSError:\n    print(0)\n",
    )
    assert run_check(sandbox, c, TASK, "hi", None).value == 0.0
    srv.close()
    assert seen in ([], [False])  # nothing ever connected


def _accept(srv: socket.socket) -> bool:
    try:
        srv.accept()
        return True
    except OSError:
        return False


def test_the_check_cannot_write_outside_its_folder_or_read_keys(sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-123")
    target = tmp_path / "escaped.txt"
    c = check(
        tmp_path,
        "import os\nkeys = [k for k in os.environ if 'KEY' in k]\ntry:\n"
        f"    open({str(target)!r}, 'w').write('x'); wrote = True\nexcept OSError:\n    wrote = False\n"
        "print(0.0 if (keys or wrote) else 1.0)\n",
    )
    assert run_check(sandbox, c, TASK, "hi", None).value == 1.0
    assert not target.exists()


def test_a_script_scored_episode_counts_a_broken_check_as_a_data_error(tmp_path):
    rows = [{"id": f"q{s}", "prompt": "p", "split": s} for s in ("train", "val", "test")]
    data = write_jsonl(tmp_path / "t.jsonl", rows)
    crash = check(tmp_path, "import sys\nsys.exit(int(open(sys.argv[2]).read() != 'ok') * 0 + 1 / 0)\n")
    b = skillopt_envs.make("custom", {"data_dir": str(data), "options": {"scorer": "script", "check": str(crash)}})
    r = asyncio.run(b.run_episode(b.load_split("train")[0], "", FakeLLM("ok"), CTX))
    assert r.data_error and not r.scored and "crashed" in r.error and "ZeroDivisionError" in r.trajectory[-1]["content"]


def test_an_agent_task_with_a_chat_target_is_checked_in_its_workspace(tmp_path):
    root = tmp_path / "tasks"
    for name, split in (("fix", "train"), ("v", "val"), ("t", "test")):
        d = root / name
        (d / "workspace").mkdir(parents=True)
        (d / "task.md").write_text("Write the word in data.txt.")
        (d / "task.json").write_text(json.dumps({"split": split, "metadata": {"task_type": "chore"}}))
        (d / "workspace" / "data.txt").write_text("banana")
        check(d, '#!/bin/sh\ntest "$(cat "$2/reply.txt")" = "$(cat "$2/data.txt")"\n', name="check")
    b = skillopt_envs.make("custom", {"data_dir": str(root), "options": {}})
    task = b.load_split("train")[0]
    assert (task.task_id, task.task_type) == ("fix", "chore")
    assert asyncio.run(b.run_episode(task, "", FakeLLM("banana"), CTX)).hard == 1.0
    assert asyncio.run(b.run_episode(task, "", FakeLLM("apple"), CTX)).hard == 0.0
    (root / "v" / "check").unlink()
    with pytest.raises(skillopt_envs.DataError, match="has no check"):
        skillopt_envs.make("custom", {"data_dir": str(root), "options": {}}).preflight(["train"])


@pytest.mark.parametrize("body,status", [("#!/bin/sh\nexit 2\n", 2), ("#!/bin/sh\nno-such-command-here\n", 127)])
def test_a_check_that_dies_silently_with_a_status_other_than_1_is_a_data_error(sandbox, tmp_path, body, status):
    out = run_check(sandbox, check(tmp_path, body, name="check"), TASK, "hi", None)
    assert out.broken and f"exit status {status}" in out.reason, out


def test_a_silent_check_that_exits_1_still_scores_0(sandbox, tmp_path):
    out = run_check(sandbox, check(tmp_path, "#!/bin/sh\nexit 1\n", name="check"), TASK, "hi", None)
    assert out.value == 0.0


def test_a_shell_check_can_use_awk_and_the_basic_etc_files_but_no_secrets(sandbox, tmp_path):
    body = (
        "#!/bin/sh\nset -e\nn=$(echo \"a b c\" | awk '{print NF}')\n"
        "test -r /etc/ld.so.cache\n"
        "if cat /etc/shadow >/dev/null 2>&1; then echo shadow-readable; exit 1; fi\n"
        "if ls /etc/ssh >/dev/null 2>&1; then echo ssh-keys-visible; exit 1; fi\n"
        'test "$n" = 3 && echo 1\n'
    )
    out = run_check(sandbox, check(tmp_path, body, name="check"), TASK, "hi", None)
    assert out.value == 1.0, out


def test_a_workspace_with_hard_links_and_a_sparse_file_reaches_the_check_as_it_is(sandbox, tmp_path):
    """What the jail now sends back whole (a file under two names, 200 MB of holes around a few bytes) goes to the
    check the same way: the archive on the host holds the data once, the check sees the links and the holes."""
    from skillopt_envs.custom.check import write_workspace_tar

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("linked")
    (ws / "b.txt").hardlink_to(ws / "a.txt")
    with open(ws / "sparse.bin", "wb") as f:
        f.truncate(200 * 1024 * 1024)
        f.write(b"head")
        f.seek(150 * 1024 * 1024)
        f.write(b"middle")
    size = write_workspace_tar(ws, tmp_path / "ws.tar")
    assert (tmp_path / "ws.tar").stat().st_size < 1024 * 1024 and size.largest == 200 * 1024 * 1024
    body = (
        "import os, sys\nw = sys.argv[2]\nst = os.stat(os.path.join(w, 'sparse.bin'))\n"
        "f = open(os.path.join(w, 'sparse.bin'), 'rb'); head = f.read(4); f.seek(150 << 20); mid = f.read(6)\n"
        "same = os.stat(os.path.join(w, 'a.txt')).st_ino == os.stat(os.path.join(w, 'b.txt')).st_ino\n"
        "print(st.st_size, st.st_blocks * 512 < (1 << 20), head, mid, same)\n"
        "print(1 if st.st_size == 200 << 20 and st.st_blocks * 512 < (1 << 20) and head == b'head' "
        "and mid == b'middle' and same else 0)\n"
    )
    out = run_check(sandbox, check(tmp_path, body), TASK, None, ws)
    assert out.value == 1.0, out
