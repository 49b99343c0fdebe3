"""An agent task's workspace: the project's files at the session's commit (from git, never the live checkout), else
an empty folder."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

MAX_WORKSPACE_BYTES = 64 * 1024 * 1024


def recipe_for(project: Path, commit: str) -> dict[str, str]:
    """{"kind": "git", "commit": sha} when the project's repository has the session's commit, else empty."""
    if not commit or not all(c in "0123456789abcdef" for c in commit.lower()):
        return {"kind": "empty"}
    p = subprocess.run(
        ["git", "-C", str(project), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, check=False
    )
    return {"kind": "git", "commit": commit} if p.returncode == 0 else {"kind": "empty"}


def materialise(project: Path, recipe: dict[str, str], dest: Path) -> str:
    """Fill `dest` from the recipe: regular files of `git archive <commit>` only, within MAX_WORKSPACE_BYTES. Returns
    "" or why the workspace was left empty."""
    dest.mkdir(parents=True, exist_ok=True)
    if recipe.get("kind") != "git":
        return ""
    proc = subprocess.Popen(
        ["git", "-C", str(project), "archive", "--format=tar", recipe["commit"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    total, why = 0, ""
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        for m in tar:
            if not m.isfile():
                continue
            total += m.size
            if total > MAX_WORKSPACE_BYTES:
                why = f"the commit's files exceed {MAX_WORKSPACE_BYTES // 2**20} MiB"
                break
            tar.extract(m, dest, filter="data")
    proc.stdout.close()
    proc.wait()
    return why
