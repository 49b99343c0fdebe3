"""SearchQA data: materialised items, id manifests (SkillOpt's paper split ships in `splits/`), split aliases.

Items are SkillOpt's materialised format, `{id, question, context, answers}`, in
`<data_dir>/{train,val,test}/` (the first `*.json` of each folder by name; SkillOpt names it
`items.json`). A manifest folder has the same layout with `{id}` entries only; its ids choose the
items, looked up across all of the data folder's splits, in manifest order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TypedDict

from skillopt_envs.base import DataError, check_new_id, read_json_list
from skillopt_envs.kit import SPLITS, manifest_ids, split_name  # noqa: F401 - SPLITS: re-exported

# SkillOpt's SearchQA id split (400 train / 200 val / 1400 test), shipped with the project (see splits/LICENSE-SkillOpt)
PAPER_SPLIT_DIR = Path(__file__).resolve().parent / "splits"
PAPER_COUNTS = {"train": 400, "val": 200, "test": 1400}
ITEM_KEYS = ("id", "question", "context", "answers")


class SearchQAItem(TypedDict):
    """One materialised item: the question, the retrieved documents as one context text, the accepted answers."""

    id: str
    question: str
    context: str
    answers: list[str]


def split_folder(split: str) -> str:
    return split_name(split, "SearchQA")


def split_file(folder: Path) -> Optional[Path]:
    """The first *.json of a split folder, by name (the reference's rule); None if there is none."""
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.glob("*.json") if p.is_file())
    return files[0] if files else None


_ITEMS_FIX = "a SearchQA split file is a JSON list of {id, question, context, answers} objects (python -m skillopt_envs.searchqa.materialize writes one)"
_MANIFEST_FIX = 'a SearchQA manifest is a JSON list of {"id": ...} objects'


def read_items(path: Path) -> list[SearchQAItem]:
    """Materialised items, each checked: id, question, context (strings) and answers (a list of strings, or one);
    an id listed twice is an error (it would be played and counted twice)."""
    items = read_json_list(path, _ITEMS_FIX)
    seen: dict[str, int] = {}
    for n, it in enumerate(items):
        if not isinstance(it, dict) or not all(k in it for k in ITEM_KEYS):
            raise DataError(
                f"{path}: item {n} ({str(it)[:80]}) lacks one of id, question, context, answers "
                "(an id-only manifest goes in env.manifest_dir, with the items in env.data_dir)"
            )
        check_new_id(path, seen, it["id"], n)
        if not isinstance(it["question"], str) or not isinstance(it["context"], str):
            raise DataError(f"{path}: item {it['id']!r} needs a string question and context")
        a = it["answers"]
        if isinstance(a, str):
            it["answers"] = [a]
        elif not isinstance(a, list) or not a or not all(isinstance(x, str) for x in a):
            raise DataError(f"{path}: item {it['id']!r} needs answers as a non-empty list of strings")
    return items


def read_manifest(manifest_dir: Path, split: str) -> list[str]:
    folder = manifest_dir / split_folder(split)
    return manifest_ids(folder, split_file(folder), split, '{"id": ...}', _MANIFEST_FIX)


def load_pool(root: Path) -> dict[str, SearchQAItem]:
    """Every item under root's split folders, by id (an id listed twice is an error)."""
    pool: dict[str, SearchQAItem] = {}
    found = False
    for s in SPLITS:
        path = split_file(root / s)
        if path is None:
            continue
        found = True
        for it in read_items(path):
            key = str(it["id"])
            if key in pool:
                raise DataError(f"{path}: item id {key!r} appears twice in {root}")
            pool[key] = it
    if not found:
        raise DataError(
            f"no SearchQA items under {root}: a data folder holds train/ val/ test/ items.json "
            "(python -m skillopt_envs.searchqa.materialize writes them)"
        )
    return pool


@dataclass(frozen=True)
class Presence:
    split: str
    listed: int
    present: int


def manifest_presence(pool: Mapping[str, SearchQAItem], manifest_dir: Path) -> list[Presence]:
    out = []
    for s in SPLITS:
        ids = read_manifest(manifest_dir, s)
        out.append(Presence(s, len(ids), sum(i in pool for i in ids)))
    return out
