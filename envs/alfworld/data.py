"""ALFWorld splits: the `json_2.1.1` layout from ALFWORLD_DATA, SkillOpt manifests, or built-in samples."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from envs.base import DataError, Task

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# our split names -> the folder alfworld-download produces
SPLIT_DIRS = {"train": "train", "val": "valid_seen", "valid_seen": "valid_seen", "test": "valid_unseen", "valid_unseen": "valid_unseen"}
MANIFEST_SPLITS = {"train": "train", "val": "val", "valid_seen": "val", "test": "test", "valid_unseen": "test"}


def task_type_of(folder_name: str) -> str:
    for t in TASK_TYPES:
        if folder_name.startswith(t):
            return t
    return "unknown"


def resolve_root(data_dir: Optional[str]) -> Optional[Path]:
    """The directory holding `json_2.1.1` (or json_2.1.1 itself); None when nothing is configured."""
    raw = data_dir or os.environ.get("ALFWORLD_DATA")
    if not raw:
        return None
    root = Path(os.path.expandvars(os.path.expanduser(raw))).resolve()
    if not root.is_dir():
        raise DataError(f"ALFWorld data directory {root} does not exist; set env.data_dir or ALFWORLD_DATA to the folder alfworld-download filled")
    return root


def _json_dir(root: Path) -> Path:
    if (root / "json_2.1.1").is_dir():
        return root / "json_2.1.1"
    if any((root / d).is_dir() for d in ("train", "valid_seen", "valid_unseen")):
        return root
    raise DataError(f"no json_2.1.1/ (or train/, valid_seen/, valid_unseen/) under {root}; point env.data_dir at ALFWorld's data folder")


def walk_split(root: Path, split: str) -> list[Task]:
    if split == "all":
        return [t for s in ("train", "valid_seen", "valid_unseen") for t in walk_split(root, s)]
    sub = SPLIT_DIRS.get(split)
    if sub is None:
        raise DataError(f"unknown ALFWorld split {split!r}; use one of {', '.join(SPLIT_DIRS)} or all")
    base = _json_dir(root) / sub
    if not base.is_dir():
        raise DataError(f"ALFWorld split folder {base} does not exist")
    tasks = []
    for game in sorted(base.glob("*/*/game.tw-pddl")):
        folder = game.parent.parent.name
        tasks.append(Task(f"{sub}/{folder}/{game.parent.name}", task_type_of(folder), {"gamefile": str(game)}))
    if not tasks:
        raise DataError(f"no game.tw-pddl files under {base}; run alfworld-download or point env.data_dir elsewhere")
    return tasks


def manifest_split(root: Optional[Path], manifest_dir: str, split: str, skip_missing: bool) -> list[Task]:
    if split == "all":
        return [t for s in ("train", "val", "test") for t in manifest_split(root, manifest_dir, s, skip_missing)]
    name = MANIFEST_SPLITS.get(split)
    if name is None:
        raise DataError(f"unknown ALFWorld split {split!r}; use train, val, test or all")
    path = Path(manifest_dir).expanduser() / name / "items.json"
    if not path.is_file():
        raise DataError(f"manifest {path} not found; env.manifest_dir must hold train/ val/ test/ items.json")
    if root is None:
        raise DataError("a manifest's gamefile paths are relative to ALFWORLD_DATA: set it or env.data_dir")
    items = json.loads(path.read_text())
    tasks, missing = [], []
    for item in items:
        game = root / item["gamefile"]
        if not game.is_file():
            missing.append(str(game))
            continue
        tasks.append(Task(str(item.get("id") or item["gamefile"]), item.get("task_type") or task_type_of(game.parent.parent.name), {"gamefile": str(game)}))
    if missing and not skip_missing:
        raise DataError(
            f"{len(missing)} of {len(items)} games in {path} are missing (first: {missing[0]}); "
            "download them or set env.options.skip_missing_games=true"
        )
    if not tasks:
        raise DataError(f"none of the games in {path} exist under {root}")
    return tasks
