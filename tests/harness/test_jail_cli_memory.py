"""The agent CLI's memory is out of its commands' reach: a command (same uid, the CLI's own child) cannot open the
CLI's /proc/<pid>/mem (to read its token or rewrite its conversation), environ (the token), maps, its open
descriptors or its working folder. The kernel grants those to a process of the same uid unless the target is not
dumpable, and an exec makes a process dumpable again unless it cannot read the program it runs: the jail runs the
CLI from an exec-only copy of its executable. With the real CLIs (the scripted model asks for one command), and
with a compiled stand-in CLI as root and as an unprivileged user (bubblewrap's user namespace)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from harness_helpers import _hostile_run, _jail

from skillopt_ray.harness.jail import JAIL_PREFIX, JailLimits, jail_env

# Walks up from the command to the CLI (the process whose parent is the namespace's init, pid 1) and tries what a
# hostile command would; prints one line: CLI <name> then each probe's outcome (OK or the errno's name).
PROBE = r"""
import errno, os
def parent(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("PPid:"):
            return int(line.split()[1])
pid = os.getpid()
while parent(pid) != 1:
    pid = parent(pid)
def attempt(what, fn):
    try:
        fn()
        return what + "=OK"
    except OSError as e:
        return what + "=" + errno.errorcode.get(e.errno, str(e.errno))
def read(name, flags=os.O_RDONLY):
    fd = os.open("/proc/%d/%s" % (pid, name), flags)
    try:
        if name != "mem":
            os.read(fd, 64)
    finally:
        os.close(fd)
def take_fd():  # pidfd_getfd: a copy of the CLI's descriptor 0
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        if libc.syscall(438, pidfd, 0, 0) < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
    finally:
        os.close(pidfd)
own = attempt("own-maps", lambda: open("/proc/self/maps").read(64))
print("CLI", open("/proc/%d/comm" % pid).read().strip(), pid,
      attempt("mem-write", lambda: read("mem", os.O_RDWR)), attempt("mem", lambda: read("mem")),
      attempt("environ", lambda: read("environ")), attempt("maps", lambda: read("maps")),
      attempt("fds", lambda: os.listdir("/proc/%d/fd" % pid)), attempt("cwd", lambda: os.readlink("/proc/%d/cwd" % pid)),
      attempt("getfd", take_fd),
      own)
"""
PROBE_CMD = "python3 - <<'EOF'\n" + PROBE + "EOF\n"
# each refused: by the file's owner (root, for a process that is not dumpable) or by ptrace's access rule
REFUSED = {k: "EACCES" for k in ("mem-write", "mem", "environ", "maps", "fds", "cwd")} | {"getfd": "EPERM"}


def _probe_line(out: str) -> dict[str, str]:
    m = re.search(r"^CLI (\S+) (\d+) (.*)$", out, re.M)
    assert m, out[-2000:]
    seen = dict(part.split("=", 1) for part in m.group(3).split())
    return {"name": m.group(1), "pid": m.group(2), **seen}


@pytest.mark.parametrize("harness,name", [("codex", "codex"), ("claude_code", "claude")])
def test_a_command_cannot_open_the_real_cli_memory(tmp_path, monkeypatch, harness, name):
    out, run, _ = _hostile_run(tmp_path, monkeypatch, PROBE_CMD, JailLimits(), harness=harness)
    assert run.final_message == "<answer>done</answer>"
    got = _probe_line(out)
    assert got["name"] == name and got["pid"] == "2", got  # the CLI itself, under the init
    assert got["own-maps"] == "OK", got  # the command still reads its own
    assert {k: got[k] for k in REFUSED} == REFUSED, got


def _stand_in(prefix: Path) -> str:
    """A compiled CLI in the prefix (a copy of bash), as the jail sees it: it runs the command as its child."""
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(shutil.which("bash") or "/bin/bash", prefix / "bin" / "cli")
    return f"{JAIL_PREFIX}/bin/cli"


def test_a_command_cannot_open_a_compiled_cli_memory(tmp_path, monkeypatch):
    import asyncio

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    jail, ws = _jail(tmp_path)
    cli = _stand_in(jail.prefix)
    env = jail_env(jail.home_path(), jail.prefix_path(), {"SKILLOPT_AGENT_KEY": "tok-must-stay-inside"})
    r = asyncio.run(jail.run(ws, env, [cli, "-c", PROBE_CMD + "true"], 30.0, 4096))
    assert r.returncode == 0, r.stderr[-2000:]
    got = _probe_line(r.stdout)
    assert got["name"] == "cli" and got["pid"] == "2" and got["own-maps"] == "OK", got
    assert {k: got[k] for k in REFUSED} == REFUSED, got
    copies = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # the exec-only copy the jail ran
    assert len(copies) == 1 and stat.S_IMODE(copies[0].stat().st_mode) == 0o111, copies


NOBODY_DRIVER = r"""
import asyncio, json, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from skillopt_ray.harness import jail as jail_mod
root = Path(sys.argv[2])
os.environ["XDG_CACHE_HOME"] = str(root / "cache")
jail = jail_mod.Jail(root / "j", root / "prefix")
env = jail_mod.jail_env(jail.home_path(), jail.prefix_path(), {})
r = asyncio.run(jail.run(root / "ws", env, [sys.argv[3], "-c", sys.argv[4]], 30.0, 4096))
print(json.dumps({"rc": r.returncode, "out": r.stdout, "err": r.stderr[-2000:]}))
"""


def test_a_command_cannot_open_the_cli_memory_for_an_unprivileged_caller_too(tmp_path):
    """As another user bubblewrap runs the jail in a user namespace where the jail's uid is the caller's own, the
    owner of the exec-only copy: the copy is mounted read-only, so no command can make it readable again."""
    from conftest import need_bwrap

    need_bwrap()
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root (to become an unprivileged user), setpriv and /usr/bin/python3")
    repo = Path(__file__).resolve().parents[2]
    top = Path(tempfile.mkdtemp(prefix="jm-nobody-"))
    try:
        pkgs = top / "pkgs"
        (pkgs / "skillopt_envs").mkdir(parents=True)
        (pkgs / "skillopt_envs" / "__init__.py").write_text("")
        shutil.copy(repo / "envs" / "sandbox.py", pkgs / "skillopt_envs" / "sandbox.py")
        (pkgs / "skillopt_ray" / "harness").mkdir(parents=True)  # the jail's own modules, nothing else
        for init in ("skillopt_ray", "skillopt_ray/harness"):
            (pkgs / init / "__init__.py").write_text("")
        for mod in (repo / "skillopt_ray" / "harness").glob("jail*.py"):
            shutil.copy(mod, pkgs / "skillopt_ray" / "harness" / mod.name)
        (top / "driver.py").write_text(NOBODY_DRIVER)
        (top / "ws").mkdir()
        cli = _stand_in(top / "prefix")
        script = PROBE_CMD + "chmod 755 " + cli + " 2>/dev/null || echo CHMOD-REFUSED"
        for p in [top, *top.rglob("*")]:
            os.chown(p, 65534, 65534, follow_symlinks=False)
        top.chmod(0o755)
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"]
        argv += [str(top / "driver.py"), str(pkgs), str(top)]
        proc = subprocess.run([*argv, cli, script], capture_output=True, text=True, timeout=60, cwd="/")
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        assert r["rc"] == 0, r
        got = _probe_line(r["out"])
        assert got["name"] == "cli" and got["own-maps"] == "OK", got
        assert {k: got[k] for k in REFUSED} == REFUSED, got
        assert "CHMOD-REFUSED" in r["out"], r
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_no_exec_only_copy_means_no_run_and_a_sandbox_start_error(tmp_path, monkeypatch):
    """Where the copy cannot be made (the cache folder is a file here) the CLI is not started dumpable: the
    episode is a sandbox_start error naming the folder and the fix, and the model is never asked."""
    from conftest import need_bwrap
    from harness_helpers import start_error_without_model

    need_bwrap()
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(shutil.which("bash") or "/bin/bash", prefix / "bin" / "codex")
    err = start_error_without_model(tmp_path, prefix)
    assert re.search("exec-only copy in .*cache.*XDG_CACHE_HOME", str(err)), err
    assert err.kind == "sandbox_start"
