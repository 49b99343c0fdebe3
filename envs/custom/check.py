"""A user's check script, run in the sandbox (no network, limits, no keys) as `check <task.json> <reply.txt>` or, for
an agent task, `check <task.json> <workspace>`.

How its run becomes a score: the last non-empty line of its output is the score when it is a number in [0, 1]; a
check that prints nothing scores by its exit status (0: 1.0, 1: 0.0). A check that crashes (a Python traceback, a
signal, the time limit, a silent exit with any other status: 127 is the shell's "command not found"), prints a number outside [0, 1] or prints something that is not a number has
broken, not the reply: the task counts as a data error, never as a 0 that looks real.
"""

from __future__ import annotations

import copy
import io
import json
import os
import re
import tarfile
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.base import DataError
from skillopt_envs.holes import SPARSE, RangeReader, data_ranges
from skillopt_envs.sandbox import Limits, Sandbox, head_and_tail

# a score as a person writes it: ASCII digits, an optional sign, point and exponent (float() alone also takes
# "nan", "0_1" and other scripts' digits)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
OUTPUT_CHARS = 1500  # of the check's stdout and stderr, each, shown to the analysts

# main.py in the sandbox: unpack the workspace when there is one (a sparse file's data comes packed: put each range
# back at its offset, holes between), then run the check with the task's two arguments
_WRAPPER = r"""
import json, os, signal, subprocess, sys, tarfile
cfg = json.load(open("run.json"))

def unpack_sparse(path, size, ranges):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    out = os.open(path + ".sparse", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    at = 0
    for offset, length in ranges:
        for done in range(0, length, 1 << 20):
            n = min(length - done, 1 << 20)
            os.pwrite(out, os.pread(fd, n, at + done), offset + done)
        at += length
    os.ftruncate(out, size)
    os.close(fd)
    os.close(out)
    os.replace(path + ".sparse", path)

if cfg["tar"]:
    with tarfile.open("workspace.tar") as t:
        t.extractall("workspace", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        for m in t.getmembers():
            if m.isfile() and "@SPARSE@" in m.pax_headers:
                unpack_sparse(os.path.join("workspace", m.name), *json.loads(m.pax_headers["@SPARSE@"]))
    os.remove("workspace.tar")
os.chmod(cfg["check"], 0o755)
argv = [sys.executable, cfg["check"]] if cfg["python"] else [os.path.abspath(cfg["check"])]
sys.stdout.flush()
rc = subprocess.call(argv + ["task.json", cfg["target"]])
if rc < 0:  # the check died of a signal: die of it too, so the sandbox reports a signal and not a status
    if -rc not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
    sys.exit(128 - rc)
sys.exit(rc)
""".replace("@SPARSE@", SPARSE)


@dataclass(frozen=True)
class CheckOutcome:
    """The check's score, or `broken` (the reason it gave no usable score); `output` is what the analysts see."""

    value: Optional[float]
    reason: str
    output: str
    infra: bool = False  # the sandbox itself could not start: an infrastructure failure

    @property
    def broken(self) -> bool:
        return self.value is None


def check_file(path: Path, where: str) -> Path:
    """A usable check: an existing file, a .py or executable; DataError naming `where` and the fix otherwise."""
    if path.is_dir():
        raise DataError(f"{where}: the check {path} is a folder; give the script's own path (env.options.check=<file>)")
    if not path.is_file():
        raise DataError(f"{where}: the check {path} does not exist; give an existing script (env.options.check=<path>)")
    if path.suffix != ".py" and not os.access(path, os.X_OK):
        raise DataError(f"{where}: the check {path} is not executable; chmod +x it (or give a .py file)")
    return path


@dataclass(frozen=True)
class WorkspaceSize:
    """What an archived workspace holds: bytes of its files, its largest file, and its entries."""

    total: int = 0
    largest: int = 0
    entries: int = 0


def write_workspace_tar(folder: Path, dest: Path) -> WorkspaceSize:
    """The agent's workspace as a tar archive at `dest` (regular files and folders; symlinks are left out, a hard
    link goes as a link, a sparse file by its data), written as it goes rather than held in memory: the agent's
    jail lets a workspace reach its disk limit."""
    size = WorkspaceSize()
    with tarfile.open(dest, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(folder.rglob("*")):
            if p.is_symlink() or not (p.is_file() or p.is_dir()):
                continue
            info = tar.gettarinfo(str(p), arcname=str(p.relative_to(folder)))
            if not info.isfile():  # a folder, or a second name of a file already in (tarfile keeps the inode)
                tar.addfile(info)
                size = WorkspaceSize(size.total, size.largest, size.entries + 1)
                continue
            with open(p, "rb") as f:
                st = os.fstat(f.fileno())
                ranges = data_ranges(f.fileno(), st.st_size) if st.st_blocks * 512 < st.st_size else None
                if ranges is not None:
                    info.size = sum(n for _, n in ranges)
                    info.pax_headers = {SPARSE: json.dumps([st.st_size, ranges])}
                tar.addfile(info, io.BufferedReader(RangeReader(f.fileno(), ranges)) if ranges is not None else f)
            size = WorkspaceSize(size.total + info.size, max(size.largest, st.st_size), size.entries + 1)
    return size


def sized_for(sandbox: Sandbox, size: WorkspaceSize) -> Sandbox:
    """`sandbox`, or a copy with room for the workspace twice over (its archive and the unpacked files), its largest
    file and its entries: a workspace the check cannot unpack would hide the task as a broken check."""
    lim, mb = sandbox.limits, 1 << 20
    # the archive, the unpacked files and, for a sparse file, its data once more while its holes are put back
    disk_mb, file_mb, files = 3 * size.total // mb + 64, size.largest // mb + 2, size.entries + 1024
    if disk_mb <= lim.disk_mb and file_mb <= lim.file_mb and files <= lim.disk_files:
        return sandbox
    bigger = copy.copy(sandbox)
    bigger.limits = replace(
        lim, disk_mb=max(lim.disk_mb, disk_mb), file_mb=max(lim.file_mb, file_mb), disk_files=max(lim.disk_files, files)
    )
    return bigger


def run_check(
    sandbox: Sandbox, check: Path, task: dict[str, Any], reply: Optional[str], workspace: Optional[Path]
) -> CheckOutcome:
    """Run `check` on a reply (written to reply.txt) or on an agent's workspace, and read its verdict."""
    with tempfile.TemporaryDirectory(prefix="skillopt-check-") as tmp:
        d = Path(tmp)
        name = "check.py" if check.suffix == ".py" else "check"
        (d / "task.json").write_text(json.dumps(task, ensure_ascii=False), encoding="utf-8")
        inputs = {name: check, "task.json": d / "task.json", "run.json": d / "run.json"}
        if workspace is not None:
            sandbox = sized_for(sandbox, write_workspace_tar(workspace, d / "workspace.tar"))
            inputs["workspace.tar"] = d / "workspace.tar"
        else:
            (d / "reply.txt").write_text(reply or "", encoding="utf-8")
            inputs["reply.txt"] = d / "reply.txt"
        target = "workspace" if workspace is not None else "reply.txt"
        run = {"check": name, "python": name == "check.py", "tar": workspace is not None, "target": target}
        (d / "run.json").write_text(json.dumps(run), encoding="utf-8")
        r = sandbox.run(_WRAPPER, inputs, d / "out")
    output = _shown(r.stdout, r.stderr)
    if not r.started:
        return CheckOutcome(None, f"the check could not run: {r.describe()}", output, infra=True)
    return verdict(r.returncode, r.timed_out, r.stdout, r.stderr, r.describe(), output)


def verdict(returncode: int, timed_out: bool, stdout: str, stderr: str, described: str, output: str) -> CheckOutcome:
    """The score rule of the module docstring, applied to one finished run."""
    if timed_out or returncode < 0:
        return CheckOutcome(None, f"the check broke: {described}", output)
    # an uncaught exception ends Python with status 1; a check that finished (status 0) may have relayed the reply's
    # own traceback, which must not turn the reply's failure into a data error left out of the scores
    if returncode != 0 and "Traceback (most recent call last)" in stderr:
        return CheckOutcome(None, f"the check crashed (exit status {returncode}; its traceback is below)", output)
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines and returncode not in (0, 1):  # 2 and up: the shell's own errors (127: no such command) and others
        return CheckOutcome(None, f"the check printed no score and ended with exit status {returncode}", output)
    if not lines:
        value = 1.0 if returncode == 0 else 0.0
        return CheckOutcome(value, f"the check printed nothing and exited with status {returncode}", output)
    if not _DECIMAL.fullmatch(lines[-1]):
        return CheckOutcome(None, f"the check's last line {lines[-1][:80]!r} is not a score in [0, 1]", output)
    value = float(lines[-1]) + 0.0  # + 0.0: "-0" is a score of 0, not -0
    if not 0.0 <= value <= 1.0:
        return CheckOutcome(None, f"the check printed {value:g}, outside [0, 1]", output)
    return CheckOutcome(value, f"the check printed {value:g}", output)


def _shown(stdout: str, stderr: str) -> str:
    parts = [f"[stdout]\n{head_and_tail(stdout, OUTPUT_CHARS)}" if stdout.strip() else "[stdout] (empty)"]
    if stderr.strip():
        parts.append(f"[stderr]\n{head_and_tail(stderr, OUTPUT_CHARS)}")
    return "\n".join(parts)


def make_sandbox(isolation: str, timeout_s: float) -> Sandbox:
    """The sandbox checks run in: `timeout_s` of wall clock and of CPU per check, the sandbox's other limits."""
    return Sandbox(isolation, Limits(cpu_s=max(1, int(timeout_s)), wall_s=timeout_s))
