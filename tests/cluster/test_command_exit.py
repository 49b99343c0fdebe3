"""The command's process ends as Python's exit would (threads, atexit handlers, buffered output), minus the freeing
of every module's objects one by one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_the_exit_waits_for_threads_runs_atexit_keeps_output_and_skips_the_teardown(tmp_path: Path):
    script = textwrap.dedent(
        f"""
        import atexit, threading, time, sys
        from pathlib import Path
        from skillopt_ray.cluster import client

        out = Path({str(tmp_path)!r})

        class Teardown:
            def __del__(self):  # runs only when Python frees the module's objects at its exit
                (out / "teardown").write_text("ran")

        kept = Teardown()

        def command_main():
            def late():
                time.sleep(0.3)
                (out / "thread").write_text("done")

            threading.Thread(target=late).start()  # not a daemon: an exit waits for it
            atexit.register(lambda: (out / "atexit").write_text("ran"))
            sys.stdout.write("no newline, still buffered")
            return 3

        client.command_main = command_main
        client.command_exit()
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert p.stdout == "no newline, still buffered"
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()
