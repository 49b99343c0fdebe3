"""Which of a night's tasks can be scored. A task that cannot (a harvested task whose rule checks the guard refused,
a folder with no check or a broken task.json) is left out of the night with one line and counted in its report:
played, it would be a data error in every episode, and enough of them stop the whole run after paid calls."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from skillopt_ray.sleep.harvest.task_folder import CHECK_PROGRAM
from skillopt_ray.sleep.harvest.tasks import OPS

# the ops the harvest's check.py runs itself (tool_called is judged by the runner, never by check.py)
RUNNABLE_OPS = frozenset(op for op in OPS if op != "tool_called")
CHECK_NAMES = ("check", "check.py")


@dataclass
class FolderTasks:
    """A task folder as a night plays it: the scorable tasks' ids per split, and the others with the reason."""

    splits: dict[str, list[str]] = field(default_factory=lambda: {"train": [], "val": [], "test": []})
    left_out: dict[str, str] = field(default_factory=dict)  # task id -> "<split>: why it cannot be scored"


def why_unscorable(task: Path, meta: dict[str, object]) -> str:
    """Why `task` cannot be scored, or "" when it can. A task whose check.py is the harvest's own needs a rule check
    that program runs or a rubric (scored by the judge, stages/judge.py); any other check (one you wrote or edited)
    is trusted to score."""
    check = next((task / n for n in CHECK_NAMES if (task / n).is_file()), None)
    if check is None:
        return "it has no check (check or check.py)"
    if check.name == "check.py" and check.read_bytes() == CHECK_PROGRAM.read_bytes():
        md = meta.get("metadata")
        checks = md.get("checks") if isinstance(md, dict) else None
        runnable = [c for c in checks or [] if isinstance(c, dict) and c.get("op") in RUNNABLE_OPS]
        rubric = md.get("rubric") if isinstance(md, dict) else None
        if not runnable and not (isinstance(rubric, str) and rubric.strip()):  # a rubric: the judge scores it
            return "no rule check its check.py can run and no rubric for the judge (none was mined, or the guard refused them)"
    return ""


def read_folder(folder: Path) -> FolderTasks:
    """Every task sub-folder of `folder` (hidden ones are not tasks), scorable or left out."""
    out = FolderTasks()
    for t in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            meta = json.loads((t / "task.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out.left_out[t.name] = "?: its task.json is missing or not JSON"
            continue
        split = meta.get("split") if isinstance(meta, dict) else "?"
        if split is None:  # no split named: the run's split_ratio places it, and it is not counted here
            continue
        if split not in out.splits:
            out.left_out[t.name] = f"?: its split {split!r} is not train, val or test"
            continue
        why = "it has no task.md" if not (t / "task.md").is_file() else why_unscorable(t, meta)
        if why:
            out.left_out[t.name] = f"{split}: {why}"
        else:
            out.splits[split].append(t.name)
    return out
