"""The bubblewrap jail an agent CLI runs in: no network but the model endpoint, no keys but the episode's own
token, and limits on time, memory, processes, disk bytes, file count and file size.

The model endpoint is a Unix socket bind-mounted into the jail; a small Node forwarder inside listens on the
jail's own loopback (the jail has no route to the host's 127.0.0.1); the launcher starts the CLI once it listens.

Everything the agent can write lives on two tmpfs inside the jail, each capped in bytes and in files: one holds its
workspace and home, the other /tmp and /dev/shm (so that filling /tmp leaves the CLI room to write its own files).
Nothing it writes reaches the host disk while it runs, and its /tmp counts against its limits (and against its
memory, since a tmpfs is memory). A launcher inside the jail mounts them, copies the prepared workspace and home
onto the first, sets the process limit, and drops to an unprivileged uid (a fresh one per
jail when started as root: the kernel never applies the process limit to root, and a uid of its own keeps other
jails' processes out of its count). The CLI and the commands the agent runs live in a PID namespace of their own
under a tiny init: they can signal neither the init, the launcher nor the forwarder. The CLI runs from an exec-only
copy of its executable, which keeps it not dumpable: no command can open its /proc/<pid>/mem, environ or fd/
(jail_exe.py). When the CLI ends or its time is up, the launcher kills whatever the agent left running and streams
the workspace and home back through an inherited descriptor as a tar archive (folders, regular files, hard links as
links, sparse files by their data; skillopt_ray/harness/jail_launcher.py); the host unpacks it, checked, into the
workspace and home the episode reads (jail_export.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from skillopt_envs.sandbox import (
    BWRAP_ISOLATION,
    ETC_BASICS,
    _python_dirs,
    bwrap_path,
    dev_args,
    fresh_uid,
    userns_filter,
)

from skillopt_ray.harness.jail_exe import cli_mount
from skillopt_ray.harness.jail_export import Unpacked, unpack_export
from skillopt_ray.harness.jail_launcher import FORWARDER_JS, INIT_PY, LAUNCHER_PY

if TYPE_CHECKING:  # the jail's own modules run alone (as another user, with the system Python): no engine imports
    from skillopt_ray.llm.wire import AgentOptions

__all__ = ["FORWARDER_JS", "Jail", "JailLimits", "JailResult", "jail_env", "unpack_export"]

JAIL_WORKSPACE = "/workspace"
JAIL_HOME = "/home/agent"
JAIL_PREFIX = "/opt/harness"
JAIL_SOCKET_DIR = "/run/skillopt"
JAIL_AREA = "/run/jail-disk"  # a capped tmpfs holding the workspace and the home
JAIL_SCRATCH = "/run/jail-tmp"  # another holding /tmp and /dev/shm (filling them leaves the CLI room for its files)
JAIL_PORT = 38080
EXPORT_GRACE_S = 20.0  # after the launcher's own deadline: time to end the agent and send its files back


@dataclass(frozen=True)
class JailLimits:
    """What one agent run may use besides time and memory (llm.target.agent.*); see the README's harness section."""

    processes: int = 512  # processes and threads of the jail's uid together (Codex alone runs about 45 on 2 cores)
    disk_mb: int = 1024  # the workspace and the home together (a tmpfs: memory, counted as such)
    disk_files: int = 20000  # files and folders there, and again in /tmp and /dev/shm (each tmpfs's inode count)
    tmp_mb: int = 512  # /tmp and /dev/shm together (another tmpfs)
    file_mb: int = 256  # the largest file any process may write, the CLI's stdout and stderr included

    @staticmethod
    def from_agent(agent: AgentOptions) -> JailLimits:
        """The limits from a role's `agent` settings (missing keys: the defaults)."""
        d = JailLimits()
        return JailLimits(
            processes=int(agent.get("processes", d.processes)),
            disk_mb=int(agent.get("disk_mb", d.disk_mb)),
            disk_files=int(agent.get("disk_files", d.disk_files)),
            file_mb=int(agent.get("file_mb", d.file_mb)),
            tmp_mb=int(agent.get("tmp_mb", d.tmp_mb)),
        )


@dataclass
class JailResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    out_of_memory: bool
    wall_s: float
    peak_rss_mb: float  # the process tree's resident memory plus the jail's tmpfs, at its highest
    peak_disk_mb: float = 0.0  # the jail's tmpfs alone, at its highest
    exported: bool = True  # the agent's files came back whole (False: the launcher was killed or never started)
    skipped: int = 0  # what the agent left that was not sent back: symlinks, devices, unreadable files
    over_limit: str = ""  # the agent's files passed the archive's byte limit: where it stopped (the rest stayed)
    export_problem: str = ""  # why the files did not come back whole (the launcher's or the host's failure)
    export_host_fault: bool = False  # the host itself failed to unpack them (evidence outside the agent's reach)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tree_pids(pid: int) -> list[int]:
    """A process and all its descendants (from /proc)."""
    found, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
        found.append(p)
    return found


def _rss_kb(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, ValueError, IndexError):
            continue
    return total


def _tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants (from /proc)."""
    return _rss_kb(_tree_pids(pid))


def _area_used_kb(pids: list[int]) -> int:
    """Bytes on the jail's two tmpfs (through a jailed process's view of the filesystem), 0 while they are not up."""
    for p in pids[1:]:  # the first is bubblewrap's outer process, on the host's filesystem
        try:
            stats = [os.statvfs(f"/proc/{p}/root{area}") for area in (JAIL_AREA, JAIL_SCRATCH)]
        except OSError:
            continue
        return sum((st.f_blocks - st.f_bfree) * st.f_frsize // 1024 for st in stats)
    return 0


def pick_uid() -> int:
    """The uid the jail's processes run as: the caller's own (it then owns a user namespace, in which the kernel
    counts processes per jail), or, for root, a fresh unused one (fresh_uid), so that the count is this jail's."""
    return fresh_uid() if os.geteuid() == 0 else os.getuid()


def _system_mounts() -> list[str]:
    """bwrap arguments that give the jail the host's system files read-only: /usr, the /bin and /lib folders (or
    their symlinks), the few /etc files programs look up, and the project's Python for the agent's scripts. /run
    is a small tmpfs holding the mount points the launcher fills."""
    argv = ["--ro-bind", "/usr", "/usr", "--proc", "/proc", *_dev_args()]
    argv += ["--perms", "0755", "--size", str(1024 * 1024), "--tmpfs", "/run"]
    for d in ("/etc", "/opt", "/opt/skillopt", "/home", JAIL_SOCKET_DIR, "/run/seed", JAIL_AREA, JAIL_SCRATCH):
        argv += ["--perms", "0755", "--dir", d]  # bubblewrap makes the folders it needs 0700 (root's only)
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    for f in ETC_BASICS:
        if os.path.exists(f):
            argv += ["--ro-bind", f, f]
    made: set[str] = set()
    for d in _python_dirs():  # the project's Python (openpyxl, pandas), read-only, for the agent's scripts
        for parent in reversed(Path(d).parents):
            if str(parent) != "/" and str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", d, d]
    return argv


def _dev_args() -> list[str]:
    """The jail's /dev. As root, bubblewrap's own. In a user namespace bubblewrap's --dev would nest a second user
    namespace (to mount devpts) that leaves the launcher unable to mount its tmpfs: a small /dev is built instead
    (dev_args) and the launcher mounts a fresh devpts (PTYs for the CLIs)."""
    if os.geteuid() == 0:
        return dev_args(own=False)
    argv = dev_args(own=True) + ["--symlink", "pts/ptmx", "/dev/ptmx"]
    return argv + ["--perms", "0755", "--dir", "/dev/pts", "--perms", "0755", "--dir", "/dev/shm"]


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


# (audit arch, ptrace, process_vm_readv, process_vm_writev) per machine
_TRACE_SYSCALLS = {"x86_64": (0xC000003E, 101, 310, 311), "aarch64": (0xC00000B7, 117, 270, 271)}


def no_trace_filter() -> Optional[bytes]:
    """A seccomp filter refusing ptrace and cross-process memory reads and writes (EPERM), for the CLI and every
    command it runs: no command can attach to the CLI and make it exit as it pleases. None on an unknown machine."""
    import platform
    import struct

    spec = _TRACE_SYSCALLS.get(platform.machine())
    if spec is None:
        return None
    arch, *calls = spec
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    ld, jeq, ret = 0x20, 0x15, 0x06
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, allow), (ld, 0, 0, 0)]
    for i, nr in enumerate(calls):  # each: refused when it matches, else the next test
        prog.append((jeq, len(calls) - i, 0, nr))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


# folders the launcher covers with its tmpfs, and the system folders bubblewrap mounts whole
_COVERED = (JAIL_WORKSPACE, JAIL_HOME, "/tmp", "/dev/shm")
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/run", "/opt")


def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def _covered(path: str) -> bool:
    """Whether `path` lies in a folder the launcher covers (mounting it there directly would be hidden)."""
    return _under(path, _COVERED)


def _user_files(root: Path, uid: int) -> None:
    """The jail's /etc/passwd and /etc/group: root, the agent (its uid, home /home/agent) and nobody, nothing of the
    host's accounts (a CLI asking who it is gets an answer)."""
    (root / "passwd").write_text(
        f"root:x:0:0:root:/root:/bin/sh\nagent:x:{uid}:{uid}:agent:{JAIL_HOME}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (root / "group").write_text(f"root:x:0:\nagent:x:{uid}:\nnogroup:x:65534:\n")


class Jail:
    """One agent run's walls. `root` holds home/ (the home's seed, then what came back), the socket folder, the
    jail's own passwd and group files and the export archive on the host."""

    def __init__(
        self,
        root: Path,
        prefix: Path,
        isolation: str = "bwrap",
        read_only: tuple[str, ...] = (),
        limits: JailLimits = JailLimits(),
    ):
        self.root = root
        self.prefix = prefix
        self.isolation = isolation
        # host files or folders the agent may read, mounted at the same paths; the project's Python too where it
        # lies under a folder the launcher covers (a checkout under /tmp): bound in place for the launcher to start,
        # then put back over the launcher's tmpfs like any covered read-only path
        self.read_only = read_only + tuple(d for d in _python_dirs() if _covered(d) and d not in read_only)
        self.limits = limits
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

    def argv(
        self, host_workspace: Path, env: dict[str, str], cmd: list[str], fds: list[int], timeout_s: float = 3600.0
    ) -> list[str]:
        """The whole command line; with bwrap, the export archive's descriptor (and the seccomp pipe's) are added
        to `fds` for the jail to inherit."""
        inner_sock = f"{JAIL_SOCKET_DIR}/api.sock" if self.isolation == "bwrap" else self.socket_path
        fwd = "/opt/skillopt/forwarder.js" if self.isolation == "bwrap" else str(self.root / "forwarder.js")
        if self.isolation != "bwrap":
            return ["node", fwd, inner_sock, str(self.port), *cmd]
        exe = bwrap_path()
        if exe is None:
            raise RuntimeError(
                "bubblewrap (bwrap) is not installed: apt-get install bubblewrap, or llm.target.agent.jail=none (unsafe)"
            )
        uid = pick_uid()
        _user_files(self.root, uid)
        argv = [exe, *BWRAP_ISOLATION, *self._identity_args(uid), *_system_mounts()]
        argv += [
            "--ro-bind",
            str(self.root / "passwd"),
            "/etc/passwd",
            "--ro-bind",
            str(self.root / "group"),
            "/etc/group",
        ]
        argv += ["--ro-bind", str(self.prefix), JAIL_PREFIX, "--ro-bind", str(self.root / "forwarder.js"), fwd]
        exec_only = cli_mount(self.prefix, JAIL_PREFIX, cmd[0])  # the CLI runs not dumpable (jail_exe.py)
        if exec_only:
            argv += ["--ro-bind", *exec_only]
        argv += ["--ro-bind-try", self.socket_path, inner_sock]
        argv += [
            "--ro-bind",
            str(host_workspace),
            "/run/seed/workspace",
            "--ro-bind",
            str(self.root / "home"),
            "/run/seed/home",
        ]
        argv += ["--dir", JAIL_WORKSPACE, "--dir", JAIL_HOME, "--dir", "/tmp"]
        argv += self._read_only_args()
        for k, v in env.items():
            argv += ["--setenv", k, v]
        argv += _seccomp_args(fds)
        cfg = self._launcher_config(uid, self._open_export(fds), timeout_s)
        # -S: the standard library alone (no site-packages to scan), for a faster start
        fwd_argv = ["node", fwd, inner_sock, str(self.port)]
        return argv + [sys.executable, "-I", "-S", "-c", LAUNCHER_PY, json.dumps(cfg), *fwd_argv, "--", *cmd]

    def _read_only_args(self) -> list[str]:
        """bubblewrap arguments for the host paths the agent may read (a page image, a corpus folder the workspace
        links to), mounted read-only at their own paths, their parent folders readable. One under a folder the
        launcher covers with its tmpfs (/tmp, say) is mounted aside first; the launcher puts it back in place."""
        argv: list[str] = []
        for n, p in enumerate(self.read_only):
            if _covered(p):
                argv += ["--ro-bind", p, f"/run/ro/{n}"]
                continue
            for parent in reversed(Path(p).parents):
                if str(parent) != "/" and not _under(str(parent), _COVERED + _SYSTEM) and not os.path.islink(parent):
                    argv += ["--perms", "0755", "--dir", str(parent)]  # bubblewrap would make it 0700
            argv += ["--ro-bind", p, p]
        return argv

    def _stashed_read_only(self) -> list[list[Any]]:
        """[where bubblewrap mounted it, where it belongs, whether it is a folder] for each read-only path the
        launcher must put back under its tmpfs."""
        return [[f"/run/ro/{n}", p, os.path.isdir(p)] for n, p in enumerate(self.read_only) if _covered(p)]

    @staticmethod
    def _identity_args(uid: int) -> list[str]:
        """Who the launcher starts as: root without a user namespace (it then drops to `uid`), or the caller in a
        user namespace of its own; either way with only the capabilities it needs to set the jail up."""
        caps = ["CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN"] if os.geteuid() == 0 else ["CAP_SYS_ADMIN"]
        argv = ["--cap-drop", "ALL"]
        for cap in caps:
            argv += ["--cap-add", cap]
        return argv if os.geteuid() == 0 else ["--unshare-user", "--uid", str(uid), "--gid", str(os.getgid()), *argv]

    def _open_export(self, fds: list[int]) -> int:
        fd = os.open(self.root / "export.tar", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        fds.append(fd)
        return fd

    def _launcher_config(self, uid: int, export_fd: int, timeout_s: float) -> dict[str, Any]:
        lim, mb = self.limits, 1024 * 1024
        return {
            "uid": uid,
            "gid": uid if os.geteuid() == 0 else os.getgid(),
            "areas": [[JAIL_AREA, lim.disk_mb * mb, lim.disk_files], [JAIL_SCRATCH, lim.tmp_mb * mb, lim.disk_files]],
            "file_bytes": lim.file_mb * mb,
            # the archive holds at most the tmpfs's bytes (hard links once, sparse files by their data) plus a
            # header per file: the launcher stops adding files at the budget and cannot write past the limit
            "export_budget": lim.disk_mb * mb + lim.disk_files * 2048 + mb,
            "export_bytes": lim.disk_mb * mb + lim.disk_files * 2048 + 2 * mb,
            "rlimits": {"RLIMIT_NPROC": lim.processes, "RLIMIT_CORE": 0},
            "dirs": {
                "workspace": [JAIL_AREA, "/run/seed/workspace", JAIL_WORKSPACE, 0o700],
                "home": [JAIL_AREA, "/run/seed/home", JAIL_HOME, 0o700],
                "tmp": [JAIL_SCRATCH, None, "/tmp", 0o1777],
                "shm": [JAIL_SCRATCH, None, "/dev/shm", 0o1777],
            },
            "export": ["workspace", "home"],
            "export_fd": export_fd,
            "deadline_s": timeout_s if timeout_s != float("inf") else 10.0**8,
            "cwd": JAIL_WORKSPACE,
            "devpts": os.geteuid() != 0,  # see _dev_args
            "read_only": self._stashed_read_only(),
            "no_trace": (no_trace_filter() or b"").hex(),
            "init_py": INIT_PY,
        }

    async def run(
        self, host_workspace: Path, env: dict[str, str], cmd: list[str], timeout_s: float, memory_mb: int
    ) -> JailResult:
        """Run `cmd` (the CLI's argv, paths as the jail sees them) to its end, the time or the memory limit; with
        bwrap, the agent's workspace and home then come back into `host_workspace` and `root`/home."""
        fds: list[int] = []
        argv = self.argv(host_workspace, env, cmd, fds, timeout_s)
        if self.isolation == "bwrap" and os.path.exists(self.socket_path):
            os.chmod(self.socket_path, 0o777)  # the jail's uid connects; the folder around it stays the caller's
        out_path, err_path = self.root / "stdout.txt", self.root / "stderr.txt"
        t0 = time.monotonic()
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
            watch = await self._watch(proc, t0, timeout_s, memory_mb)
        result = JailResult(
            proc.returncode if proc.returncode is not None else -9,
            out_path.read_text("utf-8", "replace"),
            err_path.read_text("utf-8", "replace"),
            watch.timed_out,
            watch.out_of_memory,
            time.monotonic() - t0,
            watch.peak_kb / 1024,
            watch.peak_disk_kb / 1024,
        )
        return self._take_back(result, host_workspace) if self.isolation == "bwrap" else result

    async def _watch(self, proc: Any, t0: float, timeout_s: float, memory_mb: int) -> _Watch:
        """Wait for the jail to end, killing its whole process group past the memory limit (resident memory plus
        the jail's tmpfs) or the time limit (with bwrap, the launcher ends the agent itself at `timeout_s` and
        sends its files back; this is the backstop)."""
        w = _Watch()
        limit_s = timeout_s + (EXPORT_GRACE_S if self.isolation == "bwrap" else 0.0)
        try:
            while True:
                try:
                    await asyncio.wait_for(proc.wait(), timeout=0.2)
                    break
                except asyncio.TimeoutError:
                    pass
                pids = _tree_pids(proc.pid)
                disk = _area_used_kb(pids) if self.isolation == "bwrap" else 0
                used = _rss_kb(pids) + disk
                w.peak_kb, w.peak_disk_kb = max(w.peak_kb, used), max(w.peak_disk_kb, disk)
                if used > memory_mb * 1024:
                    w.out_of_memory = True
                    break
                if time.monotonic() - t0 > limit_s:
                    w.timed_out = True
                    break
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            await proc.wait()
        return w

    def _take_back(self, result: JailResult, host_workspace: Path) -> JailResult:
        """Unpack what the launcher sent back (the workspace into `host_workspace`, the home into root/home) and
        note whether it came whole and whether the launcher hit its own deadline."""
        export = self.root / "export.tar"
        got = unpack_export(export, {"workspace": host_workspace, "home": self.root / "home"})
        export.unlink(missing_ok=True)
        result.exported = got.whole
        result.export_problem = "" if got.whole else _export_problem(got, result.stderr)
        result.export_host_fault = bool(got.problem)
        result.over_limit = str(got.note.get("over_limit", ""))
        result.skipped = int(got.note.get("skipped", 0)) + got.too_long
        result.timed_out = result.timed_out or bool(got.note.get("timed_out"))
        if "cli_status" in got.note:  # the CLI's own exit status, not the launcher's
            result.returncode = int(got.note["cli_status"])
        return result


def _export_problem(got: Unpacked, stderr: str) -> str:
    """Why the agent's files did not come back whole, in one line: the launcher's own word when it gave one."""
    if got.problem:
        return f"the host could not unpack them ({got.problem})"
    said = [ln for ln in stderr.splitlines() if ln.startswith("skillopt-jail: ")]
    if said:
        return said[-1][len("skillopt-jail: ") :][:300]
    if got.note:
        return f"{int(got.note.get('members', 0)) - got.members} of the archive's members did not arrive"
    return "the launcher ended before it sent them (killed, or it never started)"


@dataclass
class _Watch:
    """What watching a jail found."""

    timed_out: bool = False
    out_of_memory: bool = False
    peak_kb: int = 0
    peak_disk_kb: int = 0


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
