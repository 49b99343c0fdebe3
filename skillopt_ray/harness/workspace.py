"""The agent's workspace for one episode, laid out as the reference lays it out, and the path guard."""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

# the path guard lives with the benchmarks' sandbox, so that a benchmark can check its folders before a run
from skillopt_envs.sandbox import DENIED_COMPONENTS, check_paths  # noqa: E402, F401

from skillopt_ray.harness.skill_md import SKILL_PATH


@dataclass
class WorkspaceSpec:
    """What goes into a workspace besides SKILL.md."""

    task: str = ""
    extra_files: dict[str, str] = field(default_factory=dict)  # relative path -> text
    copy_files: dict[str, str] = field(default_factory=dict)  # relative path -> source file
    link_dirs: dict[str, str] = field(default_factory=dict)  # relative path -> directory (symlinked)
    images: list[str] = field(default_factory=list)


def prepare_workspace(work_dir: str | Path, skill_md: str, spec: WorkspaceSpec) -> Path:
    """Delete and recreate `work_dir`; write SKILL.md, task.md (when the task is not empty), the extras, and the
    images as attachments/NN_<name> listed in ATTACHMENTS.md. Never AGENTS.md or CLAUDE.md."""
    wd = Path(work_dir)
    check_paths([wd, *spec.link_dirs.values(), *(Path(i).parent for i in spec.images)])
    if wd.exists():
        shutil.rmtree(wd)
    wd.mkdir(parents=True)
    skill = wd / SKILL_PATH
    skill.parent.mkdir(parents=True)
    skill.write_text(skill_md, encoding="utf-8")
    if spec.task:
        (wd / "task.md").write_text(spec.task, encoding="utf-8")
    for rel, text in spec.extra_files.items():
        (wd / rel).parent.mkdir(parents=True, exist_ok=True)
        (wd / rel).write_text(text, encoding="utf-8")
    for rel, src in spec.copy_files.items():
        (wd / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, wd / rel)
    for rel, src in spec.link_dirs.items():
        (wd / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.realpath(src), wd / rel, target_is_directory=True)
    if spec.images:
        (wd / "attachments").mkdir()
        lines = [
            "# Attachments",
            "",
            "The files below are copies of the images that belong to this task; open them to inspect them.",
            "",
        ]
        for n, img in enumerate(spec.images, 1):
            image = Path(img)
            if not image.is_file():
                raise FileNotFoundError(f"attachment {image} does not exist")
            rel = f"attachments/{n:02d}_{image.name}"
            shutil.copyfile(image, wd / rel)
            lines.append(f"- `{rel}` (source: `{image.resolve()}`)")
        (wd / "ATTACHMENTS.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return wd


def remove_tree(top: Path) -> int:
    """Remove a folder an agent filled, whatever its depth: iteratively (shutil.rmtree recurses, and a thousand nested
    folders raised RecursionError past its ignore_errors), never through a symlink, each entry's failure its own.
    Returns how many entries could not be removed."""
    failed = 0
    try:
        is_dir = top.is_dir() and not top.is_symlink()
    except OSError:
        return 1
    if not is_dir:
        with contextlib.suppress(FileNotFoundError):
            top.unlink()
        return 0
    stack: list[tuple[str, bool]] = [(str(top), False)]  # (folder, its entries already removed or queued)
    while stack:
        path, emptied = stack.pop()
        try:
            if emptied:
                os.rmdir(path)
                continue
            os.chmod(path, 0o700)  # an agent's `chmod 000` folder is still the caller's to remove
            stack.append((path, True))
            with os.scandir(path) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        stack.append((e.path, False))
                    else:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(e.path)
        except FileNotFoundError:
            continue
        except OSError:
            failed += 1
    return failed
