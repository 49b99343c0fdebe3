"""ALFWorld splits: SkillOpt's paper split (shipped), other manifests, the `json_2.1.1` folders, or built-in samples."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from skillopt_envs.base import DataError, Task, check_new_id, manifest_entries
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import SPLIT_ALIASES

# Task types as the reference reports them, in its matching order: a game's type is the
# first of these found in its path, so `pick_and_place_simple-...` games are `pick_and_place`.
TASK_TYPES = (
    "pick_and_place",
    "pick_two_obj_and_place",
    "look_at_obj_in_light",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_clean_then_place_in_recep",
)
OTHER_TYPE = "other"

# The task-folder prefixes alfworld-download writes (`json_2.1.1/<split>/<prefix>-<obj>-...`); the sample games use them too.
GAME_FOLDER_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

# SkillOpt's ALFWorld path split (39 train / 18 val / 134 test), shipped with the project (see splits/LICENSE-SkillOpt)
PAPER_SPLIT_DIR = Path(__file__).resolve().parent / "splits"
PAPER_COUNTS = {"train": 39, "val": 18, "test": 134}

# split names (with the reference's aliases) -> the folder alfworld-download produces / the manifest folder
SPLIT_DIRS = {
    "train": "train",
    "val": "valid_seen",
    "valid_seen": "valid_seen",
    "selection": "valid_seen",
    "test": "valid_unseen",
    "valid_unseen": "valid_unseen",
}
MANIFEST_SPLITS = SPLIT_ALIASES  # a manifest names its splits as the other benchmarks do


def task_type_of(path: str) -> str:
    """The reference's rule: the first declared type that is a substring of the game's path, else `other`."""
    for t in TASK_TYPES:
        if t in path:
            return t
    return OTHER_TYPE


def game_ref(gamefile: str | Path) -> str:
    """`<split>/<task folder>/<trial>` of a `.../json_2.1.1/<split>/<task>/<trial>/game.tw-pddl` path: names a game
    whatever split or manifest it came from (sample keys use it)."""
    parts = Path(gamefile).parts
    return "/".join(parts[-4:-1]) if len(parts) >= 4 else str(gamefile)


def game_payload(game: Path, ref: str) -> JSONObject:
    """A game task's payload. `expected_turns` (the walkthrough's length, when the file has one) is the env pool's
    guess of how long an episode runs before it has played the game: it starts the longest first, so a long game
    does not start last and hold the rollout open alone. Only the order episodes start in depends on it."""
    payload: JSONObject = {"gamefile": str(game), "game_ref": ref}
    try:
        with open(game, encoding="utf-8") as f:
            steps = len(json.load(f).get("walkthrough") or [])
    except (OSError, ValueError, AttributeError, TypeError):
        steps = 0  # an unreadable game fails its episode with a clear error; the order only loses its guess
    if steps:
        payload["expected_turns"] = steps
    return payload


def resolve_root(data_dir: Optional[str]) -> Optional[Path]:
    """The directory holding `json_2.1.1` (or json_2.1.1 itself); None when nothing is configured."""
    raw = data_dir or os.environ.get("ALFWORLD_DATA")
    if not raw:
        return None
    root = Path(os.path.expandvars(os.path.expanduser(raw))).resolve()
    if not root.is_dir():
        raise DataError(
            f"ALFWorld data directory {root} does not exist; set env.data_dir or ALFWORLD_DATA to the folder alfworld-download filled"
        )
    return root


def _json_dir(root: Path) -> Path:
    if (root / "json_2.1.1").is_dir():
        return root / "json_2.1.1"
    if any((root / d).is_dir() for d in ("train", "valid_seen", "valid_unseen")):
        return root
    raise DataError(
        f"no json_2.1.1/ (or train/, valid_seen/, valid_unseen/) under {root}; point env.data_dir at ALFWorld's data folder"
    )


def walk_split(root: Path, split: str) -> list[Task]:
    """Every game under `json_2.1.1/<split folder>/`, sorted by path; ids are `<split>/<task folder>/<trial>`."""
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
        ref = f"{sub}/{game.parent.parent.name}/{game.parent.name}"
        tasks.append(Task(ref, task_type_of(ref), game_payload(game, ref)))
    if not tasks:
        raise DataError(f"no game.tw-pddl files under {base}; run alfworld-download or point env.data_dir elsewhere")
    return tasks


def _manifest_items(manifest_dir: str | Path, name: str) -> tuple[Path, list[dict]]:
    folder = Path(manifest_dir).expanduser() / name
    path = folder / "items.json"
    if not path.is_file():
        # the reference loads the first *.json of the folder; items.json is what SkillOpt ships
        found = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if not found:
            raise DataError(f"manifest {path} not found; env.manifest_dir must hold train/ val/ test/ items.json")
        path = found[0]
    fix = 'an ALFWorld manifest is a JSON list of {"id": ..., "gamefile": "json_2.1.1/..."} objects'
    return path, manifest_entries(path, ("gamefile",), fix)


def _game_path(root: Path, gamefile: str) -> Path:
    p = Path(gamefile)
    if p.is_absolute():
        return p
    game = root / p
    if not game.exists() and p.parts and p.parts[0] == "json_2.1.1" and root.name == "json_2.1.1":
        game = root.joinpath(*p.parts[1:])  # data_dir pointed at json_2.1.1 itself
    return game


def manifest_split(root: Optional[Path], manifest_dir: str | Path, split: str, skip_missing: bool) -> list[Task]:
    """A manifest's items in its order; ids are the manifest ids, types come from the game path (TASK_TYPES)."""
    if split == "all":
        return [t for s in ("train", "val", "test") for t in manifest_split(root, manifest_dir, s, skip_missing)]
    name = MANIFEST_SPLITS.get(split)
    if name is None:
        raise DataError(
            f"unknown ALFWorld split {split!r}; use train, val (valid_seen, selection), test (valid_unseen) or all"
        )
    if root is None:
        raise DataError("a manifest's gamefile paths are relative to ALFWORLD_DATA: set it or env.data_dir")
    path, items = _manifest_items(manifest_dir, name)
    tasks, missing = [], []
    seen: dict[str, int] = {}
    for n, item in enumerate(items):
        check_new_id(path, seen, item.get("id") or item["gamefile"], n)  # an item without an id is named by its game
        game = _game_path(root, item["gamefile"])
        if not game.is_file():
            missing.append(str(game))
            continue
        tasks.append(
            Task(
                str(item.get("id") or item["gamefile"]),
                task_type_of(item["gamefile"]),
                game_payload(game, game_ref(game)),
            )
        )
    if missing and not skip_missing:
        raise DataError(
            f"{len(missing)} of {len(items)} games in {path} are missing under {root} (first: {missing[0]}); "
            "download them (alfworld-download) or set env.options.skip_missing_games=true to run without them"
        )
    if not tasks:
        raise DataError(f"none of the games in {path} exist under {root}")
    return tasks


@dataclass(frozen=True)
class SplitPresence:
    split: str
    listed: int
    present: int


def manifest_presence(root: Path, manifest_dir: str | Path) -> list[SplitPresence]:
    """How many of each manifest split's games exist under root (for the start-up data note)."""
    out = []
    for name in ("train", "val", "test"):
        try:
            _, items = _manifest_items(manifest_dir, name)
        except DataError:
            continue
        present = sum(1 for it in items if _game_path(root, it["gamefile"]).is_file())
        out.append(SplitPresence(name, len(items), present))
    return out
