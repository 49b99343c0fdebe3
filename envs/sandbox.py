"""Run model-written Python where it cannot hurt the host.

Each run gets a fresh directory holding only its inputs, an environment built from an
explicit allow list (never key-like names), and - with bubblewrap - its own mount, network,
PID, IPC and UTS namespaces: the filesystem is read-only system and Python directories plus
the work directory, there is no network, and every process dies with the sandbox.

The work directory is a private tmpfs capped in bytes (`disk_mb`) and in files (`disk_files`, its nr_inodes, which
bubblewrap's own --tmpfs cannot set: the launcher mounts it; see Sandbox.caps_inodes): nothing the script writes
reaches the host disk. The inputs come in read-only and are copied onto it; the files the
caller keeps go out through one inherited descriptor, written by the launcher after the
script has ended (bounded by the file-size limit). Rlimits cap CPU time, address space,
file size, open files and process count; a wall-clock timeout kills the whole process group;
new user namespaces are refused inside (a seccomp filter; `--disable-userns` where no filter
can be built and bubblewrap runs in its own user namespace). When started as root the code
drops to a fresh unused uid first, because the kernel does not apply the process-count limit
to root (the agent jail, skillopt_ray/harness/jail.py, does the same).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ISOLATIONS = ("bwrap", "none")
_BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


class SandboxUnavailable(RuntimeError):
    """No isolation mechanism; the message names the fix and the explicit opt-out."""


class SandboxStartError(RuntimeError):
    """The sandbox failed before the script could run (bubblewrap refused, the launcher never started): an
    infrastructure failure, never the model's code error."""

    kind = "sandbox_start"  # skillopt_envs.base.INFRA_KINDS


class SandboxConfigError(SandboxUnavailable):
    """A sandbox setting that would weaken it (e.g. a key-like variable in the allow list)."""


# An environment variable whose name looks like it holds a credential: never passed into model-run code.
_KEY_LIKE = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE)", re.IGNORECASE)


def key_like_names(names) -> list[str]:
    """The names in `names` that look like credentials."""
    return [str(n) for n in (names or []) if _KEY_LIKE.search(str(n))]


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 60
    wall_s: float = 90.0
    memory_mb: int = 2048  # address space per process
    file_mb: int = 64  # largest file a process may write
    processes: int = 32
    output_chars: int = 4000  # stdout/stderr kept (head and tail)
    disk_mb: int = 256  # size of the private tmpfs work directory (bwrap): all the script's files together
    open_files: int = 256  # RLIMIT_NOFILE
    # files and folders the work directory may hold (the tmpfs's nr_inodes): empty files cost no bytes, but each costs
    # kernel memory, so the byte cap alone let a script make hundreds of thousands
    disk_files: int = 4096


@dataclass
class ExecResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    files: dict[str, Path] = field(default_factory=dict)  # outputs found in the run directory
    started: bool = True  # False: the sandbox itself failed before the script could run (an infrastructure failure)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.started

    def describe(self) -> str:
        """Why the run failed, in one line a model (or a person) can act on."""
        if not self.started:
            said = (self.stderr.strip().splitlines() or [f"exit status {self.returncode}"])[0][:300]
            return f"the sandbox could not start ({said})"
        if self.timed_out:
            return "the script was killed: it ran past the wall-clock limit"
        if self.returncode < 0:
            sig = -self.returncode
            why = {
                signal.SIGXCPU: "it used up its CPU-time limit",
                signal.SIGXFSZ: "it wrote a file larger than the file-size limit",
                signal.SIGKILL: "it was killed (CPU-time or memory limit)",
                signal.SIGSEGV: "it crashed (segmentation fault)",
            }
            return f"the script was killed by signal {signal.Signals(sig).name}: {why.get(signal.Signals(sig), 'a resource limit or a crash')}"
        if self.returncode != 0:
            return f"the script exited with status {self.returncode}"
        return "ok"


def head_and_tail(text: str, limit: int) -> str:
    """At most about `limit` characters: the start and the end, with the omitted count between."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + f"\n... [{len(text) - limit} characters omitted] ...\n" + text[-half:]


def _read_bounded(path: Path, limit: int) -> str:
    """Head and tail of a file without reading all of it (a script may print gigabytes)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size <= limit:
                return f.read().decode("utf-8", "replace")
            head = f.read(limit // 2).decode("utf-8", "replace")
            f.seek(size - limit // 2)
            tail = f.read().decode("utf-8", "replace")
        return f"{head}\n... [{size - limit} bytes omitted] ...\n{tail}"
    except OSError:
        return ""


def _uid_process_count(uid: int) -> int:
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def fresh_uid() -> int:
    """An unused uid (200000 and up) for one sandbox or agent jail started as root. The kernel never applies the
    process limit to root, so the code drops to another uid; one no other process has makes the limit count this
    sandbox's processes alone (with a shared uid such as nobody's, concurrent sandboxes ate into one count)."""
    import random

    rng = random.SystemRandom()
    for _ in range(100):
        uid = rng.randrange(200_000, 1_200_000)
        if _uid_process_count(uid) == 0:
            return uid
    raise RuntimeError("no unused uid in 200000-1200000 to run sandboxed code as")


def dev_args(own: bool) -> list[str]:
    """bubblewrap arguments for /dev. Not `own`: bubblewrap's --dev. `own`: a small /dev of bound host nodes (null,
    zero, full, random, urandom, tty), for a sandbox in a user namespace whose launcher must mount: there --dev
    nests a second user namespace, from which no mount is allowed."""
    if not own:
        return ["--dev", "/dev"]
    argv = ["--perms", "0755", "--tmpfs", "/dev"]
    for node in ("null", "zero", "full", "random", "urandom", "tty"):
        argv += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
    for n, name in enumerate(("stdin", "stdout", "stderr")):
        argv += ["--symlink", f"/proc/self/fd/{n}", f"/dev/{name}"]
    return argv + ["--symlink", "/proc/self/fd", "/dev/fd"]


# Runs inside the sandbox (as `python -I -c`): copy the inputs onto the work directory, set the rlimits, drop root if
# still root, then run the script in a child process. After the script has ended (the launcher is the parent), the
# files the caller keeps are streamed out through the inherited descriptor: regular files only (no symlinks), each
# at most the file-size limit. The launcher then ends the way the script did (same exit status or signal).
_LAUNCHER = r"""
import json, os, resource, runpy, shutil, signal, stat, sys
cfg = json.loads(sys.argv[1])
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), tuple(value))
if cfg["work_mount"]:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", cfg["work"].encode(), b"tmpfs", 0, cfg["work_mount"].encode()) != 0:
        sys.stderr.write("sandbox: cannot mount the work directory: " + os.strerror(ctypes.get_errno()) + "\n")
        os._exit(125)
if os.getuid() == 0 and cfg["drop_to"] is not None:
    os.setgroups([]); os.setgid(cfg["drop_to"]); os.setuid(cfg["drop_to"])
if cfg["work_mount"]:  # bubblewrap's --cap-add also filled the inheritable set: empty every set (capset, version 3)
    if libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()) != 0:
        sys.stderr.write("sandbox: cannot drop capabilities: " + os.strerror(ctypes.get_errno()) + "\n")
        os._exit(125)
work = cfg["work"]
os.makedirs(os.path.join(work, "tmp"), exist_ok=True)
for name in os.listdir(cfg["stage"]):
    shutil.copyfile(os.path.join(cfg["stage"], name), os.path.join(work, name))
os.chdir(work)
export_fd = cfg["export_fd"]
os.write(export_fd, b'{"started": true}\n')  # the sandbox is up: a failure from here on is the script's
pid = os.fork()
if pid == 0:
    os.close(export_fd)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_bytes"], cfg["file_bytes"]))
    sys.argv = [cfg["script"]]
    sys.path.insert(0, os.getcwd())
    runpy.run_path(cfg["script"], run_name="__main__")
else:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    with os.fdopen(export_fd, "wb") as out:
        for name in cfg["keep"]:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                data = f.read(cfg["file_bytes"] + 1)[: cfg["file_bytes"]]
            out.write((json.dumps({"name": name, "size": len(data)}) + "\n").encode() + data)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
"""


# bubblewrap's isolation for any jailed process: dies with its parent, its own session, an empty environment, and
# its own IPC, PID, network, hostname and (where the kernel allows) cgroup namespaces
BWRAP_ISOLATION = (
    "--die-with-parent",
    "--new-session",
    "--clearenv",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-cgroup-try",
)


def bwrap_path() -> Optional[str]:
    return shutil.which("bwrap")


def _python_dirs() -> list[str]:
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    dirs.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    return sorted(d for d in dirs if d and d != "/" and not d.startswith("/usr"))


# A seccomp filter (classic BPF) that refuses new user namespaces: unshare/clone with CLONE_NEWUSER get EPERM,
# clone3 gets ENOSYS (its flags sit in memory a filter cannot read; libc then falls back to clone), and any other
# syscall ABI (i386, x32) is refused. bubblewrap installs it (--seccomp) after setting up the sandbox. Works for a
# root caller too, where bubblewrap's own --disable-userns (which needs --unshare-user) cannot be used.
_CLONE_NEWUSER = 0x10000000
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, 56, 272, 435),
    "aarch64": (0xC00000B7, 220, 97, 435),
}  # arch, clone, unshare, clone3


def userns_filter() -> Optional[bytes]:
    """The filter for this machine's architecture (None where we have no syscall table for it)."""
    import platform
    import struct

    spec = _SECCOMP_ARCH.get(platform.machine())
    if spec is None:
        return None
    arch, nr_clone, nr_unshare, nr_clone3 = spec
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog = [
        (ld, 0, 0, 4),  # 0: A = arch
        (jeq, 1, 0, arch),  # 1: native ABI? -> 3
        (ret, 0, 0, eperm),  # 2: other ABIs refused
        (ld, 0, 0, 0),  # 3: A = syscall number
        (jge, 7, 0, 0x40000000),  # 4: x32 numbers -> 12 (eperm)
        (jeq, 3, 0, nr_unshare),  # 5: -> 9
        (jeq, 2, 0, nr_clone),  # 6: -> 9
        (jeq, 5, 0, nr_clone3),  # 7: -> 13 (enosys)
        (ret, 0, 0, allow),  # 8
        (ld, 0, 0, 16),  # 9: A = low 32 bits of the first argument (the flags)
        (jset, 1, 0, _CLONE_NEWUSER),  # 10: CLONE_NEWUSER set -> 12
        (ret, 0, 0, allow),  # 11
        (ret, 0, 0, eperm),  # 12
        (ret, 0, 0, enosys),  # 13
    ]
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


def _read_export(path: Path, outdir: Path, keep: tuple[str, ...]) -> tuple[dict[str, Path], bool]:
    """Files the launcher streamed out (`{"name", "size"}` line, then that many bytes; only names asked for),
    and whether the launcher started at all (its first line says so before the script runs)."""
    files: dict[str, Path] = {}
    started = False
    try:
        with open(path, "rb") as f:
            while True:
                header = f.readline()
                if not header:
                    break
                meta = json.loads(header)
                if meta.get("started") is True and not started and not files:
                    started = True
                    continue
                name, size = str(meta["name"]), int(meta["size"])
                data = f.read(size)
                if name in keep and "/" not in name and name not in (".", "..") and len(data) == size:
                    (outdir / name).write_bytes(data)
                    files[name] = outdir / name
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # cut short (the launcher was killed): what was whole is kept
    return files, started


def _system_mounts(own_dev: bool = False) -> list[str]:
    """The host's /usr, system library folders and a few /etc files read-only; fresh /proc, /dev (see dev_args), /run,
    /dev/shm."""
    argv = [
        "--ro-bind",
        "/usr",
        "/usr",
        "--proc",
        "/proc",
        *dev_args(own_dev),
        "--size",
        str(1024 * 1024),
        "--tmpfs",
        "/run",
        "--size",
        str(16 * 1024 * 1024),
        "--tmpfs",
        "/dev/shm",
    ]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    argv += ["--perms", "0755", "--dir", "/etc"]  # bubblewrap would make it 0700: unreadable once root is dropped
    for f in ETC_BASICS:
        if os.path.exists(f):
            argv += ["--ro-bind", f, f]
    return argv


# the /etc files a program or shell script looks up and that hold no secrets: the dynamic linker's cache, the time
# zone, the alternatives links (/usr/bin/awk points through /etc/alternatives), name-service order, protocol and
# service names, MIME types. Never passwd, shadow, keys or certificates' private halves
ETC_BASICS = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/nsswitch.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
)


def _python_mounts() -> list[str]:
    """The interpreter's folders read-only, each one's parent folders created readable first."""
    argv: list[str] = []
    made: set[str] = set()
    for d in _python_dirs():
        for parent in reversed(Path(d).parents):  # bwrap would create them 0700: unreadable once we drop root
            if str(parent) != "/" and str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", d, d]
    return argv


def _stage_inputs(stage: Path, script: str, inputs: dict[str, Path], bwrap: bool, owner: Optional[int]) -> str:
    """Copy the inputs and the script into `stage`/in (owned by `owner`, the uid a root caller drops to); returns
    the work directory as the script sees it."""
    (stage / "in").mkdir()
    for name, src in inputs.items():
        shutil.copyfile(src, stage / "in" / name)
    (stage / "in" / "main.py").write_text(script, encoding="utf-8")
    inner = "/sandbox" if bwrap else str(stage / "work")
    if not bwrap:
        (stage / "work").mkdir()
    if owner is not None:
        for p in [stage, *stage.rglob("*")]:
            os.chown(p, owner, owner)
    return inner


class Sandbox:
    """Runs one script per call in a fresh directory; see the module docstring for the walls."""

    def __init__(self, isolation: str = "bwrap", limits: Limits = Limits(), env_allow: tuple[str, ...] = ()):
        if isolation not in ISOLATIONS:
            raise SandboxUnavailable(f"unknown sandbox isolation {isolation!r}; use one of {', '.join(ISOLATIONS)}")
        bad = key_like_names(env_allow)
        if bad:
            raise SandboxConfigError(
                f"env.options.env_allow names {', '.join(bad)}, which look like credentials; model-written code "
                "never sees API keys, tokens, secrets or passwords: remove them from env.options.env_allow"
            )
        self.isolation = isolation
        self.limits = limits
        self.env_allow = env_allow
        self.userns = os.geteuid() != 0  # unprivileged callers need a user namespace for bubblewrap
        self.disable_userns = False  # bubblewrap's own --disable-userns (with --unshare-user)
        self.seccomp = userns_filter() if isolation == "bwrap" else None
        # the work directory's file count is capped where the launcher can mount it: started as root (it then drops
        # to an unused uid), or in a user namespace that bubblewrap does not nest. Its --disable-userns would nest
        # one (so would --dev: see dev_args), so there the seccomp filter alone refuses new user namespaces; where
        # no filter can be built, --disable-userns is kept and only bytes are capped
        self.caps_inodes = isolation == "bwrap" and (not self.userns or self.seccomp is not None)
        if isolation == "bwrap":
            self._check_bwrap()

    def _check_bwrap(self) -> None:
        exe = bwrap_path()
        if exe is None:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed, and model-written code must not run unisolated: install it "
                "(Debian/Ubuntu: apt-get install bubblewrap) or set env.options.sandbox=none to run it without isolation (unsafe)"
            )
        if (
            self.userns
            and not self.caps_inodes
            and "--disable-userns" in subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30).stdout
        ):
            self.disable_userns = True
        argv = [exe, "--unshare-all"] + (["--unshare-user"] if self.userns else []) + ["--ro-bind", "/", "/", "true"]
        probe = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            raise SandboxUnavailable(
                f"bubblewrap cannot create namespaces here ({probe.stderr.strip()[:200]}); enable unprivileged user namespaces "
                "or set env.options.sandbox=none to run model code without isolation (unsafe)"
            )

    def _env(self, extra: dict[str, str], home: str) -> dict[str, str]:
        env = dict(_BASE_ENV, HOME=home, TMPDIR=f"{home}/tmp", MPLCONFIGDIR=f"{home}/tmp")
        for name in self.env_allow:
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(extra)
        return env

    def _rlimits(self, uid: int) -> dict[str, list[int]]:
        lim = self.limits
        nproc = lim.processes + _uid_process_count(uid)
        mb = 1024 * 1024
        return {
            "RLIMIT_CPU": [lim.cpu_s, lim.cpu_s + 1],
            "RLIMIT_AS": [lim.memory_mb * mb, lim.memory_mb * mb],
            "RLIMIT_NPROC": [nproc, nproc],
            "RLIMIT_NOFILE": [lim.open_files, lim.open_files],
            "RLIMIT_CORE": [0, 0],
        }

    def _bwrap_argv(self, stage: Path, inner: str, env: dict[str, str], fds: list[int]) -> list[str]:
        """bubblewrap's arguments; the seccomp filter goes in through a descriptor added to `fds`."""
        lim = self.limits
        argv = self._bwrap_namespaces() + _system_mounts(self.userns and self.caps_inodes) + _python_mounts()
        argv += [
            "--ro-bind",
            str(stage / "in"),
            "/.inputs",
            "--size",
            str(lim.disk_mb * 1024 * 1024),
            "--perms",
            "0777",
            "--tmpfs",
            inner,
            "--chdir",
            "/",
        ]
        for k, v in env.items():
            argv += ["--setenv", k, v]
        if self.seccomp is not None:
            r, w = os.pipe()
            os.write(w, self.seccomp)  # a few hundred bytes: fits the pipe buffer
            os.close(w)
            fds.append(r)
            argv += ["--seccomp", str(r)]
        return argv

    def _bwrap_namespaces(self) -> list[str]:
        """The bubblewrap binary and the namespaces it gives the script (and the capability the launcher needs)."""
        argv = [bwrap_path() or "bwrap", *BWRAP_ISOLATION]
        if self.userns:
            argv.append("--unshare-user")
        if self.disable_userns:
            argv.append("--disable-userns")
        if self.caps_inodes:
            # bubblewrap's --tmpfs takes a size but no inode count: the launcher mounts the work directory itself
            # (nr_inodes), then drops to an unprivileged uid, which clears this capability
            argv += ["--cap-add", "CAP_SYS_ADMIN"]
        return argv

    def run(
        self,
        script: str,
        inputs: dict[str, Path],
        out_dir: Path,
        env: Optional[dict[str, str]] = None,
        keep: tuple[str, ...] = (),
    ) -> ExecResult:
        """Run `script` with `inputs` copied in by name; files named in `keep` are copied to `out_dir`.

        `{dir}` in env values becomes the work directory as the script sees it. A sandbox that fails to start
        (bubblewrap refused, the launcher never ran) is tried once more; the result then says `started=False`."""
        r = self._run_once(script, inputs, out_dir, env, keep)
        if not r.started and not r.timed_out:
            time.sleep(0.5)
            r = self._run_once(script, inputs, out_dir, env, keep)
        return r

    def _run_once(
        self, script: str, inputs: dict[str, Path], out_dir: Path, env: Optional[dict[str, str]], keep: tuple[str, ...]
    ) -> ExecResult:
        owner = fresh_uid() if os.geteuid() == 0 else None  # the uid a root caller drops to
        bwrap = self.isolation == "bwrap"
        stage = Path(tempfile.mkdtemp(prefix="skillopt-sbx-"))
        outdir = Path(out_dir)
        outdir.mkdir(parents=True, exist_ok=True)
        try:
            inner = _stage_inputs(stage, script, inputs, bwrap, owner)
            env_vars = self._env({k: v.replace("{dir}", inner) for k, v in (env or {}).items()}, inner)
            export_path = stage / "export"
            export_fd = os.open(export_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            cfg = self._launcher_config(stage, inner, keep, export_fd, bwrap, owner)
            cmd = [sys.executable, "-I", "-c", _LAUNCHER, json.dumps(cfg)]
            fds = [export_fd]
            if bwrap:
                cmd = self._bwrap_argv(stage, inner, env_vars, fds) + cmd
            out_path, err_path = outdir / "stdout", outdir / "stderr"
            t0 = time.monotonic()
            try:
                rc, timed_out = self._spawn(cmd, stage, env_vars if not bwrap else {}, fds, out_path, err_path)
            finally:
                for fd in fds:
                    os.close(fd)
            wall = time.monotonic() - t0
            files, started = _read_export(export_path, outdir, keep)
            limit = self.limits.output_chars
            if bwrap and rc > 128:
                rc = -(rc - 128)  # bwrap reports a child killed by signal N as 128 + N
            return ExecResult(
                rc if not timed_out else -signal.SIGKILL,
                _read_bounded(out_path, limit),
                _read_bounded(err_path, limit),
                timed_out,
                wall,
                files,
                started,
            )
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _launcher_config(
        self, stage: Path, inner: str, keep: tuple[str, ...], export_fd: int, bwrap: bool, owner: Optional[int]
    ) -> dict[str, Any]:
        """What the launcher inside the sandbox is told: limits, the uid to drop to, the folders, what to export."""
        return {
            "rlimits": self._rlimits(owner if owner is not None else os.getuid()),
            "drop_to": owner,
            "script": "main.py",
            "stage": "/.inputs" if bwrap else str(stage / "in"),
            "work": inner,
            "keep": list(keep),
            "export_fd": export_fd,
            "file_bytes": self.limits.file_mb * 1024 * 1024,
            "work_mount": (
                f"size={self.limits.disk_mb * 1024 * 1024},nr_inodes={self.limits.disk_files},mode=0777"
                if bwrap and self.caps_inodes
                else ""
            ),
        }

    def _spawn(
        self, cmd: list[str], stage: Path, env: dict[str, str], fds: list[int], out_path: Path, err_path: Path
    ) -> tuple[int, bool]:
        """Start the sandbox in its own process group, wait up to the wall limit, kill the group.
        Returns (return code, timed out)."""
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                cmd,
                cwd=stage,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                pass_fds=tuple(fds),
            )
            timed_out = False
            try:
                proc.wait(timeout=self.limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                self._kill_group(proc)
        return proc.returncode, timed_out

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        """Kill the script's whole process group (background children included) and reap it."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


# folders holding gold answers: an agent must never be pointed at them
DENIED_COMPONENTS = ("officeqa_split", "sealqa_split")


def check_paths(paths: list[str | Path]) -> None:
    """Raise ValueError when any path, resolved, has a component naming a gold-answer folder."""
    for p in paths:
        real = Path(os.path.realpath(str(p)))
        bad = [c for c in real.parts if c in DENIED_COMPONENTS]
        if bad:
            raise ValueError(f"refusing to give an agent access to {real}: it lies under {bad[0]} (gold answers)")
