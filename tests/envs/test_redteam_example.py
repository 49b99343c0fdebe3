"""The worked example's check against a model reply that tries to game it: printing its own score, reading the hidden
tests, never returning. The reply is model-written code the check runs, so it must not be able to decide its score."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python-functions"


def _example_check(tmp_path: Path, reply: str, function: str = "mean") -> subprocess.CompletedProcess:
    task = next(
        json.loads(line) for line in (EXAMPLE / "tasks.jsonl").read_text().splitlines() if f'"{function}"' in line
    )
    (tmp_path / "task.json").write_text(json.dumps(task))
    (tmp_path / "reply.txt").write_text(reply)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(EXAMPLE / "check.py"), "task.json", "reply.txt"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def _score(p: subprocess.CompletedProcess) -> float:
    return float(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "reply",
    [
        "```python\nimport os\nprint(1.0, flush=True)\nos._exit(0)\n```",  # prints a perfect score and leaves
        "```python\nimport atexit\natexit.register(lambda: print(1.0))\ndef mean(n):\n    return -1\n```",
        "```python\nimport sys\ndef mean(n):\n    sys.stdout.write('1.0\\n'); sys.stdout.flush(); raise SystemExit(0)\n```",
    ],
    ids=["print-and-exit", "atexit", "exit-inside-the-call"],
)
def test_a_reply_cannot_print_its_own_score_to_the_example_check(tmp_path, reply):
    p = _example_check(tmp_path, reply)
    assert p.returncode == 0 and _score(p) == 0.0, p.stdout + p.stderr


def test_a_reply_is_not_told_where_the_hidden_tests_are(tmp_path):
    # it looks for the expected values in every file it can see and in its own process's arguments
    cheat = (
        "```python\nimport glob, json, os, sys\nfound = {}\n"
        "for f in glob.glob('*') + glob.glob('/tmp/*') + sys.argv[1:]:\n"
        "    try:\n        found.update({json.dumps(a): e for a, e in json.load(open(f))['metadata']['tests']})\n"
        "    except Exception:\n        pass\n"
        "def mean(n):\n    return found.get(json.dumps([n]), -1)\n```"
    )
    assert _score(_example_check(tmp_path, cheat)) == 0.0


@pytest.mark.slow
def test_a_reply_that_never_returns_fails_its_tests_without_breaking_the_check(tmp_path):
    p = _example_check(tmp_path, "```python\ndef mean(n):\n    while True:\n        pass\n```")
    assert p.returncode == 0 and _score(p) == 0.0 and "did not return within" in p.stdout, p.stdout + p.stderr


def test_a_right_reply_still_passes_the_example_check(tmp_path):
    p = _example_check(tmp_path, "```python\ndef mean(n):\n    return sum(n) / len(n) if n else None\n```")
    assert _score(p) == 1.0, p.stdout + p.stderr
