"""What made a run: the command line, the Hydra overrides, the resolved config, the package version, the git
commit (and whether the checkout had uncommitted changes) and a content hash of the code and prompts.

The command that starts or resumes a run records this in the run directory (RunDir.write_provenance); the
code hash is also part of the run's identity (cli.identity), so edited code or prompts make a new run.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import shlex
import socket
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Optional

from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.runs.records import GitState, Provenance

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # skillopt_ray/
# what decides a run's behaviour besides its config: the code and every prompt or template shipped beside it
CODE_SUFFIXES = (".py", ".md", ".txt", ".yaml", ".yml", ".json", ".j2", ".jinja")


def tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("skillopt-ray")
    except Exception:  # noqa: BLE001 - a source tree that is not installed
        import tomllib

        pyproject = PACKAGE_ROOT.parent / "pyproject.toml"
        try:
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, ValueError):
            return "unknown"


def code_roots() -> list[Path]:
    """The folders whose code and prompt files a run's identity covers: this package and the benchmarks."""
    import skillopt_envs

    return [PACKAGE_ROOT, Path(skillopt_envs.__file__).resolve().parent]


@lru_cache(maxsize=1)
def code_hash() -> str:
    """sha256 over (relative path, content) of the code and prompt files of skillopt_ray and skillopt_envs.

    Cached per process: the files a process runs do not change under it. Links to folders are not followed (no
    loop can hold the walk) and a link loop is not a file; a code file that cannot be read is a one-line error."""
    h = hashlib.sha256()
    for root in code_roots():
        files = sorted(
            p
            for p in root.rglob("*")
            if p.is_file() and p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts and ".pytest" not in p.name
        )
        for p in files:
            h.update(f"{root.name}/{p.relative_to(root).as_posix()}\n".encode())
            h.update(hashlib.sha256(_code_bytes(p)).digest())
    return h.hexdigest()[:16]


def _code_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        from skillopt_ray.cli.errors import UsageError

        raise UsageError(
            f"{path} cannot be read ({e.strerror or e}); it is part of the code a run's identity covers: fix its "
            "permissions or remove it"
        ) from None


def git_state(where: Path = PACKAGE_ROOT) -> Optional[GitState]:
    """{commit, branch, dirty} of the checkout the code runs from; None when it is not a git checkout."""

    def git(*args: str) -> Optional[str]:
        try:
            out = subprocess.run(
                ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    return GitState(commit=commit, branch=branch if branch and branch != "HEAD" else None, dirty=bool(status))


def entry_point(argv: list[str]) -> str:
    """How the command was started, as a user would type it: `python -m skillopt_ray.sweep`, `skillopt-ray`."""
    orig = list(getattr(sys, "orig_argv", []) or [])
    if "-m" in orig:
        i = orig.index("-m")
        return f"python -m {orig[i + 1]}" if i + 1 < len(orig) else "python"
    return Path(argv[0]).name if argv else "python"


def collect(
    overrides: list[str], config: PlainConfig, argv: Optional[list[str]] = None, entry: Optional[str] = None
) -> Provenance:
    """One command's provenance record. `config`: the resolved config (secrets are masked here). `entry`: how the
    command is started, when not as this process was (default: entry_point)."""
    from skillopt_ray.config import redact

    argv = [mask(a) for a in (sys.argv if argv is None else argv)]
    entry = entry or entry_point(argv)
    return Provenance(
        time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        entry_point=entry,
        command_line=" ".join([entry, *map(shlex.quote, argv[1:])]),
        argv=argv,
        cwd=os.getcwd(),
        overrides=[mask(o) for o in overrides],
        config=redact(config),
        version=tool_version(),
        git=git_state(),
        code_hash=code_hash(),
        python=sys.version.split()[0],
        user=_user(),
        host=socket.gethostname(),
    )


def mask(arg: str) -> str:
    """An override whose key looks secret (`...api_key=`, `+tracking.tags.hf_token=`) with its value masked."""
    from skillopt_ray.config import redact

    key, eq, value = arg.partition("=")
    if not eq:
        return arg
    leaf = key.lstrip("+~").rsplit(".", 1)[-1]
    return f"{key}={redact({leaf: value})[leaf]}"


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in a container without passwd entry
        return str(os.getuid())
