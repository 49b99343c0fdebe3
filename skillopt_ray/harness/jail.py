"""The bubblewrap jail an agent CLI runs in: no network but the model endpoint, no keys but the episode's own
token, writes only to its workspace (and a private home discarded after the episode), time and memory limits.

The model endpoint is a Unix socket bind-mounted into the jail; a small Node forwarder inside listens on the
jail's own loopback and starts the CLI once it listens (the jail has no route to the host's 127.0.0.1)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from skillopt_envs.sandbox import BWRAP_ISOLATION, _python_dirs, bwrap_path, userns_filter

JAIL_WORKSPACE = "/workspace"
JAIL_HOME = "/home/agent"
JAIL_PREFIX = "/opt/harness"
JAIL_SOCKET_DIR = "/run/skillopt"
JAIL_PORT = 38080

FORWARDER_JS = r"""
const net = require('net'), cp = require('child_process'), os = require('os');
const [sock, port, ...argv] = process.argv.slice(2);
const srv = net.createServer((c) => {
  const u = net.connect(sock);
  c.pipe(u); u.pipe(c);
  c.on('error', () => u.destroy()); u.on('error', () => c.destroy());
});
srv.listen(Number(port), '127.0.0.1', () => {
  const child = cp.spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'inherit', 'inherit'] });
  child.on('error', (e) => { process.stderr.write('skillopt-jail: cannot start ' + argv[0] + ': ' + e.message + '\n'); process.exit(127); });
  child.on('exit', (code, sig) => process.exit(code === null ? 128 + (os.constants.signals[sig] || 9) : code));
});
"""


@dataclass
class JailResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    out_of_memory: bool
    wall_s: float
    peak_rss_mb: float


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants (from /proc)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def _system_mounts() -> list[str]:
    """bwrap arguments that give the jail the host's system files read-only: /usr, the /bin and /lib folders (or
    their symlinks), the few /etc files programs look up, and the project's Python for the agent's scripts."""
    argv = ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    for f in (
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/etc/alternatives",
        "/etc/passwd",
        "/etc/group",
        "/etc/nsswitch.conf",
    ):
        if os.path.exists(f):
            argv += ["--ro-bind", f, f]
    made: set[str] = set()
    for d in _python_dirs():  # the project's Python (openpyxl, pandas), read-only, for the agent's scripts
        for parent in reversed(Path(d).parents):
            if str(parent) != "/" and str(parent) not in made:
                made.add(str(parent))
                argv += ["--dir", str(parent)]
        argv += ["--ro-bind", d, d]
    return argv


def _seccomp_args(fds: list[int]) -> list[str]:
    """bwrap's --seccomp with a pipe holding the filter that forbids new user namespaces inside (Codex's own
    sandbox therefore runs in full-access mode); the pipe's read end is added to `fds` for the child to inherit.
    Nothing when no filter can be built here."""
    filt = userns_filter()
    if filt is None:
        return []
    r, w = os.pipe()
    os.write(w, filt)
    os.close(w)
    fds.append(r)
    return ["--seccomp", str(r)]


class Jail:
    """One agent run's walls. `root` holds workspace/, home/ and sock/ on the host."""

    def __init__(self, root: Path, prefix: Path, isolation: str = "bwrap", read_only: tuple[str, ...] = ()):
        self.root = root
        self.prefix = prefix
        self.isolation = isolation
        self.read_only = read_only  # host files or folders the agent may read, mounted at the same paths
        (root / "home").mkdir(parents=True, exist_ok=True)
        (root / "sock").mkdir(parents=True, exist_ok=True)
        (root / "forwarder.js").write_text(FORWARDER_JS)
        self.port = JAIL_PORT if isolation == "bwrap" else _free_port()  # unjailed runs share the host's loopback

    @property
    def socket_path(self) -> str:
        return str(self.root / "sock" / "api.sock")

    def workspace_path(self, host_workspace: Path) -> str:
        return JAIL_WORKSPACE if self.isolation == "bwrap" else str(host_workspace)

    def home_path(self) -> str:
        return JAIL_HOME if self.isolation == "bwrap" else str(self.root / "home")

    def prefix_path(self) -> str:
        return JAIL_PREFIX if self.isolation == "bwrap" else str(self.prefix)

    def argv(self, host_workspace: Path, env: dict[str, str], cmd: list[str], fds: list[int]) -> list[str]:
        inner_sock = f"{JAIL_SOCKET_DIR}/api.sock" if self.isolation == "bwrap" else self.socket_path
        fwd = "/opt/skillopt/forwarder.js" if self.isolation == "bwrap" else str(self.root / "forwarder.js")
        inner = ["node", fwd, inner_sock, str(self.port), *cmd]
        if self.isolation != "bwrap":
            return inner
        exe = bwrap_path()
        if exe is None:
            raise RuntimeError(
                "bubblewrap (bwrap) is not installed: apt-get install bubblewrap, or llm.target.agent.jail=none (unsafe)"
            )
        argv = [exe, *BWRAP_ISOLATION]
        argv += ["--cap-drop", "ALL"] if os.geteuid() == 0 else ["--unshare-user"]
        argv += _system_mounts()
        argv += ["--ro-bind", str(self.prefix), JAIL_PREFIX, "--ro-bind", str(self.root / "forwarder.js"), fwd]
        argv += ["--bind", str(self.root / "sock"), JAIL_SOCKET_DIR, "--bind", str(self.root / "home"), JAIL_HOME]
        argv += ["--bind", str(host_workspace), JAIL_WORKSPACE, "--chdir", JAIL_WORKSPACE]
        for p in self.read_only:  # a page image, a corpus folder the workspace links to
            argv += ["--ro-bind", p, p]
        for k, v in env.items():
            argv += ["--setenv", k, v]
        argv += _seccomp_args(fds)
        return argv + inner

    async def run(
        self, host_workspace: Path, env: dict[str, str], cmd: list[str], timeout_s: float, memory_mb: int
    ) -> JailResult:
        """Run `cmd` (the CLI's argv, paths as the jail sees them) to its end, the time or the memory limit."""
        fds: list[int] = []
        argv = self.argv(host_workspace, env, cmd, fds)
        out_path, err_path = self.root / "stdout.txt", self.root / "stderr.txt"
        t0 = time.monotonic()
        peak = 0
        timed_out = oom = False
        base_env = (
            env
            if self.isolation == "bwrap"
            else {**env, "PATH": env.get("PATH", "") + ":" + os.environ.get("PATH", "")}
        )
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    pass_fds=tuple(fds),
                    env=base_env if self.isolation != "bwrap" else {},
                    cwd=str(host_workspace),
                )
            finally:
                for fd in fds:
                    os.close(fd)
            try:
                while True:
                    try:
                        await asyncio.wait_for(proc.wait(), timeout=0.2)
                        break
                    except asyncio.TimeoutError:
                        pass
                    rss = _tree_rss_kb(proc.pid)
                    peak = max(peak, rss)
                    if rss > memory_mb * 1024:
                        oom = True
                        break
                    if time.monotonic() - t0 > timeout_s:
                        timed_out = True
                        break
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                await proc.wait()
        return JailResult(
            proc.returncode if proc.returncode is not None else -9,
            out_path.read_text("utf-8", "replace"),
            err_path.read_text("utf-8", "replace"),
            timed_out,
            oom,
            time.monotonic() - t0,
            peak / 1024,
        )


def jail_env(home: str, prefix: str, extra: dict[str, str]) -> dict[str, str]:
    """The whole environment the agent sees: nothing inherited from the host. `python` is the project's."""
    env = {
        "PATH": f"{prefix}/bin:{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": "/tmp",
    }
    env.update(extra)
    return env


def default_prefix(configured: Optional[str]) -> Path:
    """The npm prefix holding the CLIs: the configured one, else <repo>/.harnesses."""
    if configured:
        return Path(os.path.expanduser(configured)).resolve()
    return Path(__file__).resolve().parents[2] / ".harnesses"
