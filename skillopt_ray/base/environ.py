"""Two process environments compared by what can change a run: the kept cluster's holder refuses a command whose
environment differs from its own (its actors inherit the holder's), and a command attached to the kept cluster hands
its job's workers what it adds or changes (skillopt_ray/cluster/service.py, skillopt_ray/cli/ray_session.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from skillopt_ray.base.startup_trace import ENV as TRACE_ENV

# what a shell or terminal sets on its own: a difference here says nothing about what the run's actors would see
SHELL_NOISE = frozenset(
    {"PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES", "TERM", "TERM_PROGRAM", "PS1", "PS2", "TMUX", "TMUX_PANE"}
    | {"STY", "WINDOWID"}
)


# prefixes of what a shell, a terminal multiplexer, a login session or pyenv's shims set for their own bookkeeping
NOISE_PREFIXES = ("RAY_", "PYENV_", "SSH_", "XDG_SESSION_", "ITERM_", "TERM_SESSION_")


def _search_path(value: Optional[str], environ: dict[str, str]) -> list[str]:
    """PATH without the folders a pyenv shim adds on its way to the same interpreter, and without repeats."""
    root = environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    here = os.path.dirname(sys.executable)
    seen: list[str] = []
    for entry in (value or "").split(os.pathsep):
        if entry and entry != here and not entry.startswith(root.rstrip("/") + "/") and entry not in seen:
            seen.append(entry)
    return seen


def env_difference(theirs: dict[str, str], ours: dict[str, str]) -> list[str]:
    """Names of the variables that differ between the command's environment and the holder's, counting only what
    can change a run: not what a shell or session sets for itself, not pyenv's own variables, and PATH only when it
    differs in more than the folders a pyenv shim adds (a command started through a shim was refused for that)."""
    names = (set(theirs) | set(ours)) - SHELL_NOISE - {TRACE_ENV}
    differ = []
    for n in sorted(names):
        if n.startswith(NOISE_PREFIXES) or theirs.get(n) == ours.get(n):
            continue
        if n == "PATH" and _search_path(theirs.get(n), theirs) == _search_path(ours.get(n), ours):
            continue
        differ.append(n)
    return differ


def holder_environment(pid: Optional[int] = None) -> dict[str, str]:
    """The environment a process (default: this one) was started with, before it set anything itself: for the
    holder, what Ray's workers inherit."""
    try:
        raw = Path(f"/proc/{pid or os.getpid()}/environ").read_bytes()
    except OSError:
        return dict(os.environ) if pid is None else {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def handed_environment(holder_pid: int) -> dict[str, str]:
    """What a command attached to the kept cluster must hand its job's workers: its variables that the holder's
    differ in (an API key exported after `up`), since the workers inherit the holder's."""
    holder = holder_environment(holder_pid)
    mine = dict(os.environ)
    return {k: mine[k] for k in env_difference(mine, holder) if k in mine}
