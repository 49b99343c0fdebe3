"""A 200 MB session log is read as a stream: the harvest's peak memory stays far below the file's size."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sleep_fixtures import codex_session

pytestmark = pytest.mark.slow

SIZE = 200 * 1024 * 1024


def test_a_200_mb_session_file_is_streamed_with_bounded_memory(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    path = codex_session(tmp_path / "codex", str(project), ["Speed up the importer for large files"])
    output = {"timestamp": "2020-01-01T10:00:00Z", "type": "response_item", "payload": {"type": "function_call_output"}}
    line = json.dumps({**output, "payload": {**output["payload"], "output": "x" * 100_000}}).encode() + b"\n"
    huge = json.dumps({**output, "payload": {**output["payload"], "output": "y" * 12_000_000}}).encode() + b"\n"
    with path.open("ab") as f:
        f.write(huge)  # one line over the reader's 4 MiB line limit: skipped in chunks, never held whole
        while f.tell() < SIZE:
            f.write(line * 100)
        f.write(
            b'{"timestamp":"2020-01-01T11:00:00Z","type":"event_msg","payload":{"type":"user_message","message":"no, still slow"}}\n'
        )
    assert path.stat().st_size >= SIZE
    # the peak of this process's own memory (VmHWM: getrusage's ru_maxrss can carry the forking parent's size)
    code = (
        "import re, sys\n"
        "from skillopt_ray.sleep.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print('PEAK_KB', hwm)\n"
        "sys.exit(rc)\n"
    )
    argv = ["harvest", "--project", str(project), "--codex-home", str(tmp_path / "codex"), "--claude-home",
            str(tmp_path / "claude"), "--lookback", "all", "--no-model", "--json"]  # fmt: skip
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    peak_mb = int(p.stdout.rsplit("PEAK_KB", 1)[1]) / 1024
    report = json.loads(p.stdout.rsplit("PEAK_KB", 1)[0])
    print(f"peak RSS {peak_mb:.0f} MB for a {path.stat().st_size / 2**20:.0f} MiB session log")
    assert report["sessions"] == {"codex": 1} and report["skipped_lines"] == {"oversized": 1}
    meta = json.loads(next(p for p in (project / ".skillopt" / "tasks").glob("*/task.json")).read_text())["metadata"]
    assert meta["outcome"] == "corrected"  # the correction after 200 MB was read
    assert peak_mb < 64, peak_mb  # the interpreter and the package alone take about 25 MB
