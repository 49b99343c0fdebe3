"""An agent task's workspace: the project's files at the session's commit (from git, never the live checkout), else
an empty folder."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

MAX_WORKSPACE_BYTES = 64 * 1024 * 1024


def proposed(commit: str) -> dict[str, str]:
    """The recipe a session names: its commit (checked against the repository by `verified`), else empty."""
    if commit and all(c in "0123456789abcdef" for c in commit.lower()):
        return {"kind": "git", "commit": commit}
    return {"kind": "empty"}


def verified(project: Path, recipes: list[dict[str, str]]) -> None:
    """Each git recipe whose commit the project's repository lacks becomes empty (one git call per commit)."""
    have: dict[str, bool] = {}
    for r in recipes:
        if r.get("kind") != "git":
            continue
        c = r["commit"]
        if c not in have:
            p = subprocess.run(
                ["git", "-C", str(project), "cat-file", "-e", f"{c}^{{commit}}"], capture_output=True, check=False
            )
            have[c] = p.returncode == 0
        if not have[c]:
            r.clear()
            r["kind"] = "empty"


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
