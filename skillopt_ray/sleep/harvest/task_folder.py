"""The harvest's output: a folder of agent tasks in the project's own custom-task format (`+experiment=custom
env.data_dir=<folder>` loads it as it is), with review.json beside the task folders."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.cli import review_gate as review
from skillopt_ray.sleep.harvest.recipe import materialise
from skillopt_ray.sleep.harvest.tasks import MinedTask

CHECK_PROGRAM = Path(__file__).with_name("check_program.py")


@dataclass
class Written:
    new: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # already in the folder (perhaps edited by the reviewer): untouched
    empty_workspaces: dict[str, str] = field(default_factory=dict)  # task id -> why its recipe gave no files


def write_tasks(
    out: Path,
    tasks: list[MinedTask],
    splits: dict[str, str],
    project: Path,
    header: dict[str, Any],
    checks: Optional[dict[str, Any]] = None,
) -> Written:
    """One folder per task: task.md (the prompt, all the target reads), task.json (split and metadata: the
    scorer's checks and rubric, read by the check only), check.py, workspace/. A task already in the folder is left
    as it is; review.json goes back to unreviewed whenever a task is added, and lists each new task's mined checks
    as verified, unverified or dropped, with the reason (`checks`, per task id)."""
    out.mkdir(parents=True, exist_ok=True)
    done = Written()
    for t in tasks:
        folder = out / t.id
        if folder.exists():
            done.kept.append(t.id)
            continue
        tmp = out / f".{t.id}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        (tmp / "task.md").write_text(t.prompt + "\n", encoding="utf-8")
        meta = {"split": splits[t.id], "metadata": t.metadata()}
        (tmp / "task.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        shutil.copyfile(CHECK_PROGRAM, tmp / "check.py")
        os.chmod(tmp / "check.py", 0o755)
        if t.kind == "agent":
            why = materialise(project, t.workspace, tmp / "workspace")
            if why:
                shutil.rmtree(tmp / "workspace")
                (tmp / "workspace").mkdir()
                done.empty_workspaces[t.id] = why
        os.replace(tmp, folder)  # a task folder appears whole or not at all
        done.new.append(t.id)
    try:
        prior = review.read(out)
    except review.ReviewRefused:
        prior = {}  # a damaged review.json: the folder goes back to unreviewed, rewritten whole below
    reviewed = bool(prior.get("reviewed")) and not done.new
    ids = sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))
    said = (
        {k: v for k, v in (prior.get("checks") or {}).items() if k in ids}
        if isinstance(prior.get("checks"), dict)
        else {}
    )
    said.update({k: v for k, v in (checks or {}).items() if k in done.new})
    review.write(out, {**header, "reviewed": reviewed, "tasks": ids, "checks": said})
    return done
