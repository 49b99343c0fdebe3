"""Deep and long trees an agent leaves cannot void its episode: a thousand nested folders, paths past PATH_MAX
inside the jail, and a 4 KB path in the closing note all come back (or are left out, counted) with the episode's
files whole; the host removes such trees; a workspace the agent made unreadable still comes back. The real jail,
with `sh` as the CLI."""

from __future__ import annotations

import json
import os
import sys

import pytest
from harness_helpers import _jail, _run

from skillopt_ray.harness.jail import JailLimits
from skillopt_ray.harness.workspace import remove_tree

DEEP = "i=0; while [ $i -lt 1000 ]; do mkdir d && cd d || exit 9; i=$((i+1)); done; echo bottom > f.txt; echo DEEP"
# past PATH_MAX inside the jail: 40 levels of 250-character names, made by relative steps
LONG = (
    "python3 -c \"import os\nfor i in range(40): os.mkdir('x' * 250); os.chdir('x' * 250)\n"
    "open('f.txt', 'w').write('far')\"; echo LONG"
)


@pytest.fixture
def tmp_path(tmp_path):
    """pytest's own clean-up of old temporary folders recurses: the deep trees go here, whatever the outcome."""
    yield tmp_path
    for child in list(tmp_path.iterdir()):
        remove_tree(child)


def _depth(top) -> int:
    n, here = 0, str(top)
    while os.path.isdir(os.path.join(here, "d")):
        here, n = os.path.join(here, "d"), n + 1
    return n


def test_a_thousand_nested_folders_come_back_and_the_host_removes_them(tmp_path):
    jail, ws = _jail(tmp_path)
    r = _run(jail, ws, DEEP + "; cd /workspace; echo answer > answer.txt")
    assert r.returncode == 0 and "DEEP" in r.stdout, r.stderr[-2000:]
    assert r.exported, r.export_problem
    assert (ws / "answer.txt").read_text() == "answer\n"
    assert _depth(ws) == 1000
    assert sys.getrecursionlimit() <= 1000 * 2  # shutil.rmtree would have recursed past it
    assert remove_tree(ws) == 0 and not ws.exists()


def test_a_seed_workspace_a_thousand_deep_starts_the_next_attempt(tmp_path):
    """A second attempt starts from what the first left: copying it into the jail must not recurse either."""
    jail, ws = _jail(tmp_path)
    assert _run(jail, ws, DEEP).exported
    r = _run(jail, ws, "echo again > again.txt; echo STARTED")
    assert r.returncode == 0 and "STARTED" in r.stdout, r.stderr[-2000:]
    assert r.exported and (ws / "again.txt").is_file() and _depth(ws) == 1000


def test_paths_past_path_max_inside_the_jail_are_left_out_and_the_rest_comes_back(tmp_path):
    jail, ws = _jail(tmp_path)
    r = _run(jail, ws, LONG + "; cd /workspace; echo answer > answer.txt")
    assert "LONG" in r.stdout, r.stderr[-2000:]
    assert r.exported, r.export_problem
    assert (ws / "answer.txt").read_text() == "answer\n" and r.skipped >= 1


def test_a_long_path_at_the_export_limit_keeps_the_closing_note(tmp_path):
    """The note names where the archive stopped; a ~4 KB path made it longer than the host read, which lost it."""
    jail, ws = _jail(tmp_path, JailLimits(disk_mb=2, disk_files=2000))
    script = (
        "python3 -c \"import os; d = '/'.join(['d' * 250] * 16); os.makedirs(d); "
        "[open(os.path.join(d, 'f%04d' % i), 'w').close() for i in range(1900)]\"; echo answer > answer.txt"
    )
    r = _run(jail, ws, script)
    assert r.exported, r.export_problem
    assert r.over_limit and "the archive would pass" in r.over_limit and len(r.over_limit) < 400
    assert (ws / "answer.txt").read_text() == "answer\n"


def test_a_workspace_the_agent_made_unreadable_still_comes_back(tmp_path):
    jail, ws = _jail(tmp_path)
    r = _run(jail, ws, "echo answer > answer.txt; mkdir -p sub; echo x > sub/y; chmod 000 sub /workspace")
    assert r.exported and (ws / "answer.txt").read_text() == "answer\n" and (ws / "sub" / "y").read_text() == "x\n"
    assert json.dumps(r.skipped) == "0"
