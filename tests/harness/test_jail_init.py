"""pid 1 of the agent's namespace is a tiny init: it reaps the orphans the agent's commands leave (a CLI as pid 1
reaped none), it is not dumpable, and no process under it may trace another or write its memory. The real jail,
with `sh` as the CLI."""

from __future__ import annotations

from harness_helpers import _jail, _run

# the CLI is a program that waits for its own child only (as Codex does): orphans are pid 1's to reap
ORPHANS = (
    "cat > o.sh <<'EOF'\n"
    "i=0; while [ $i -lt 300 ]; do (sh -c 'exit 0' &); i=$((i+1)); done; sleep 1\n"
    "echo ZOMBIES=$(cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == \"Z\"' | wc -l)\n"
    "EOF\n"
    "exec python3 -c \"import subprocess; subprocess.run(['sh', 'o.sh'])\""
)
TRACE = (
    "sleep 30 & "
    'python3 -c "import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True); '
    "pid = int(sys.argv[1]); r = libc.ptrace(16, pid, 0, 0); print('ATTACH', r, ctypes.get_errno()); "
    "r = libc.ptrace(16, 1, 0, 0); print('ATTACH-INIT', r, ctypes.get_errno())\" $!; "
    "cat /proc/1/environ > /dev/null 2>&1 && echo INIT-READABLE; echo CLI-PID=$$; kill $!"
)


def test_orphans_are_reaped(tmp_path):
    jail, ws = _jail(tmp_path)
    r = _run(jail, ws, ORPHANS)
    assert r.returncode == 0, r.stderr[-2000:]
    zombies = int(r.stdout.split("ZOMBIES=")[1].split()[0])
    assert zombies < 10, r.stdout


def test_no_command_may_trace_another_and_the_init_is_not_dumpable(tmp_path):
    jail, ws = _jail(tmp_path)
    r = _run(jail, ws, TRACE)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ATTACH -1 1" in r.stdout and "ATTACH-INIT -1 1" in r.stdout, r.stdout  # EPERM, even for its own child
    assert "INIT-READABLE" not in r.stdout and "CLI-PID=2" in r.stdout, r.stdout
