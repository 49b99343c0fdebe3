"""Run model-written Python where it cannot hurt the host.

Each run gets a fresh directory holding only its inputs, an environment built from an
explicit allow list (no API keys), and - with bubblewrap - its own mount, network, PID,
IPC and UTS namespaces: the filesystem is read-only system and Python directories plus the
run directory, there is no network, and every process dies with the sandbox. Rlimits cap
CPU time, address space, file size and process count; a wall-clock timeout kills the whole
process group. When started as root the code drops to an unprivileged uid first, because
the kernel does not apply the process-count limit to root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

NOBODY = 65534
ISOLATIONS = ("bwrap", "none")
_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1",
             "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}


class SandboxUnavailable(RuntimeError):
    """No isolation mechanism; the message names the fix and the explicit opt-out."""


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 60
    wall_s: float = 90.0
    memory_mb: int = 2048  # address space per process
    file_mb: int = 64  # largest file a process may write
    processes: int = 32
    output_chars: int = 4000  # stdout/stderr kept (head and tail)


@dataclass
class ExecResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    files: dict[str, Path] = field(default_factory=dict)  # outputs found in the run directory

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """Why the run failed, in one line a model (or a person) can act on."""
        if self.timed_out:
            return "the script was killed: it ran past the wall-clock limit"
        if self.returncode < 0:
            sig = -self.returncode
            why = {signal.SIGXCPU: "it used up its CPU-time limit", signal.SIGXFSZ: "it wrote a file larger than the file-size limit",
                   signal.SIGKILL: "it was killed (CPU-time or memory limit)", signal.SIGSEGV: "it crashed (segmentation fault)"}
            return f"the script was killed by signal {signal.Signals(sig).name}: {why.get(sig, 'a resource limit or a crash')}"
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


# Runs inside the sandbox before the user's script: rlimits, then (as root) drop to nobody.
_LAUNCHER = r"""
import json, os, resource, runpy, sys
cfg = json.loads(sys.argv[1])
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), tuple(value))
if os.getuid() == 0 and cfg["drop_to"] is not None:
    os.setgroups([]); os.setgid(cfg["drop_to"]); os.setuid(cfg["drop_to"])
sys.argv = [cfg["script"]]
sys.path.insert(0, os.getcwd())
runpy.run_path(cfg["script"], run_name="__main__")
"""


def bwrap_path() -> Optional[str]:
    return shutil.which("bwrap")


def _python_dirs() -> list[str]:
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    dirs.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    return sorted(d for d in dirs if d and d != "/" and not d.startswith("/usr"))


class Sandbox:
    """Runs one script per call in a fresh directory; see the module docstring for the walls."""

    def __init__(self, isolation: str = "bwrap", limits: Limits = Limits(), env_allow: tuple[str, ...] = ()):
        if isolation not in ISOLATIONS:
            raise SandboxUnavailable(f"unknown sandbox isolation {isolation!r}; use one of {', '.join(ISOLATIONS)}")
        self.isolation = isolation
        self.limits = limits
        self.env_allow = env_allow
        if isolation == "bwrap":
            self._check_bwrap()

    @staticmethod
    def _check_bwrap() -> None:
        exe = bwrap_path()
        if exe is None:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed, and model-written code must not run unisolated: install it "
                "(Debian/Ubuntu: apt-get install bubblewrap) or set env.options.sandbox=none to run it without isolation (unsafe)"
            )
        probe = subprocess.run([exe, "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True, text=True, timeout=30)
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

    def _rlimits(self, as_root: bool) -> dict[str, list[int]]:
        lim = self.limits
        nproc = lim.processes + (_uid_process_count(NOBODY) if as_root else _uid_process_count(os.getuid()))
        mb = 1024 * 1024
        return {
            "RLIMIT_CPU": [lim.cpu_s, lim.cpu_s + 1],
            "RLIMIT_AS": [lim.memory_mb * mb, lim.memory_mb * mb],
            "RLIMIT_FSIZE": [lim.file_mb * mb, lim.file_mb * mb],
            "RLIMIT_NPROC": [nproc, nproc],
            "RLIMIT_CORE": [0, 0],
        }

    def _bwrap_argv(self, workdir: Path, inner: str, env: dict[str, str], as_root: bool) -> list[str]:
        argv = [bwrap_path() or "bwrap", "--die-with-parent", "--new-session", "--clearenv",
                "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        if not as_root:
            argv.append("--unshare-user")
        argv += ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run"]
        for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(d):
                argv += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                argv += ["--ro-bind", d, d]
        for f in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
            if os.path.exists(f):
                argv += ["--ro-bind", f, f]
        made: set[str] = set()
        for d in _python_dirs():
            for parent in reversed(Path(d).parents):  # bwrap would create them 0700: unreadable once we drop root
                if str(parent) != "/" and str(parent) not in made:
                    made.add(str(parent))
                    argv += ["--perms", "0755", "--dir", str(parent)]
            argv += ["--ro-bind", d, d]
        argv += ["--bind", str(workdir), inner, "--chdir", inner]
        for k, v in env.items():
            argv += ["--setenv", k, v]
        return argv

    def run(self, script: str, inputs: dict[str, Path], out_dir: Path, env: Optional[dict[str, str]] = None,
            keep: tuple[str, ...] = ()) -> ExecResult:
        """Run `script` with `inputs` copied in by name; files named in `keep` are copied to `out_dir`.

        `{dir}` in env values becomes the run directory as the script sees it."""
        as_root = os.geteuid() == 0
        workdir = Path(tempfile.mkdtemp(prefix="skillopt-sbx-"))
        outdir = Path(out_dir)
        outdir.mkdir(parents=True, exist_ok=True)
        try:
            inner = "/sandbox" if self.isolation == "bwrap" else str(workdir)
            (workdir / "tmp").mkdir()
            for name, src in inputs.items():
                shutil.copyfile(src, workdir / name)
            (workdir / "main.py").write_text(script, encoding="utf-8")
            if as_root:
                for p in [workdir, *workdir.rglob("*")]:
                    os.chown(p, NOBODY, NOBODY)
            env_vars = self._env({k: v.replace("{dir}", inner) for k, v in (env or {}).items()}, inner)
            cfg = {"rlimits": self._rlimits(as_root), "drop_to": NOBODY if as_root else None, "script": "main.py"}
            cmd = [sys.executable, "-I", "-c", _LAUNCHER, json.dumps(cfg)]
            if self.isolation == "bwrap":
                cmd = self._bwrap_argv(workdir, inner, env_vars, as_root) + cmd
            out_path, err_path = outdir / "stdout", outdir / "stderr"
            t0 = time.monotonic()
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = subprocess.Popen(cmd, cwd=workdir, env=env_vars if self.isolation == "none" else {}, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True)
                timed_out = False
                try:
                    proc.wait(timeout=self.limits.wall_s)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    self._kill_group(proc)
            wall = time.monotonic() - t0
            files = {}
            for name in keep:
                src = workdir / name
                if src.is_file() and not src.is_symlink():
                    shutil.copyfile(src, outdir / name)
                    files[name] = outdir / name
            limit = self.limits.output_chars
            rc = proc.returncode
            if self.isolation == "bwrap" and rc > 128:
                rc = -(rc - 128)  # bwrap reports a child killed by signal N as 128 + N
            return ExecResult(rc if not timed_out else -signal.SIGKILL, _read_bounded(out_path, limit),
                              _read_bounded(err_path, limit), timed_out, wall, files)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        """Kill the script's whole process group (background children included) and reap it."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
