"""OfficeQA data: questions (a runnable split, or the public CSV with the shipped paper split) and the corpus roots.

Questions come from `env.data_dir` (or $OFFICEQA_DATA), in either of two layouts:
- the reference's runnable split: `train/ val/ test/`, each holding a CSV (the first `*.csv` by name, preferred)
  or a JSON list (the first `*.json`), one row per question;
- the public release: `officeqa_full.csv` (columns uid, question, answer, source_docs, source_files,
  difficulty); the shipped manifest (`splits/`, SkillOpt's 50/24/172 paper split) picks each split's rows.

The corpus (parsed U.S. Treasury Bulletins) is one or more document roots; a root with a `transformed/`
folder uses that folder. Parsed page JSONs (for the oracle page context) sit in a `jsons/` folder beside it.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TypedDict

from skillopt_envs.base import DataError, check_new_id, read_json_list
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import SPLIT_ALIASES, SPLITS, split_name  # noqa: F401 - SPLITS, SPLIT_ALIASES: re-exported

PAPER_SPLIT_DIR = Path(__file__).resolve().parent / "splits"
PAPER_COUNTS = {"train": 50, "val": 24, "test": 172}
FULL_CSV = "officeqa_full.csv"
DOCS_ENV = "OFFICEQA_DOCS_DIR"
# the reference's fixed fallbacks outside the repository (its repo-relative ones are data_dir-relative here)
HOME_FALLBACKS = ("~/officeqa-sparse/treasury_bulletins_parsed", "~/officeqa/treasury_bulletins_parsed")
DATA_FALLBACKS = ("officeqa_docs_official", "treasury_bulletins_parsed", "officeqa_smoke_docs")


def split_folder(split: str) -> str:
    return split_name(split, "OfficeQA")


def parse_list_field(value: Any) -> list[str]:
    """The reference's list parsing of source_files / source_docs: a list as is; a JSON list; lines; commas unless
    the text ends in .txt (so `a.txt, b.txt` stays one item); else one item. Items stripped, empties dropped."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(x).strip() for x in value if str(x).strip()]
    text = str(value).strip()
    if not text:
        return []
    try:
        loaded = json.loads(text)
    except ValueError:
        loaded = None
    if isinstance(loaded, list):
        return [str(x).strip() for x in loaded if str(x).strip()]
    if "\n" in text or "\r" in text:
        parts = text.splitlines()
    elif "," in text and not text.lower().endswith(".txt"):
        parts = text.split(",")
    else:
        parts = [text]
    return [p.strip() for p in parts if p.strip()]


class OfficeItem(TypedDict):
    """One OfficeQA question in the reference's item fields."""

    id: str
    uid: str
    question: str
    ground_truth: str
    answers: list[str]
    task_type: str
    category: str
    source_files: list[str]
    source_docs: list[str]
    split: str


def row_to_item(row: Mapping[str, object], split: str) -> OfficeItem:
    """One question in the reference's item fields (id = uid, the question stripped, ground_truth, answers,
    task_type and category: the row's category or difficulty...)."""
    uid = str(row.get("uid") or row.get("id") or "").strip()
    gt = str(row.get("ground_truth") if row.get("ground_truth") not in (None, "") else row.get("answer") or "").strip()
    task_type = str(row.get("category") or row.get("difficulty") or "").strip() or "officeqa"
    return {
        "id": uid,
        "uid": uid,
        "question": str(row.get("question") or "").strip(),
        "ground_truth": gt,
        "answers": [gt] if gt else [],
        "task_type": task_type,
        "category": task_type,
        "source_files": parse_list_field(row.get("source_files")),
        "source_docs": parse_list_field(row.get("source_docs")),
        "split": split,
    }


def read_csv_rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror}); check env.data_dir") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"{path} is not a readable UTF-8 CSV ({e}); check env.data_dir") from None


def split_file(folder: Path) -> Optional[Path]:
    """The reference's choice: the first *.csv of the folder by name, else the first *.json; None if neither."""
    if not folder.is_dir():
        return None
    for ext in ("*.csv", "*.json"):
        files = sorted(p for p in folder.glob(ext) if p.is_file())
        if files:
            return files[0]
    return None


_ROWS_FIX = (
    "an OfficeQA split file is a CSV or a JSON list of {uid, question, answer|ground_truth, source_files, ...} rows"
)


def _checked(items: list[OfficeItem], path: Path) -> list[OfficeItem]:
    seen: dict[str, int] = {}
    for n, it in enumerate(items):
        if not it["id"] or not it["question"].strip():
            raise DataError(f"{path}: row {n} has no uid/id or no question; {_ROWS_FIX}")
        check_new_id(path, seen, it["id"], n)
    return items


def read_split_folder(folder: Path, split: str) -> list[OfficeItem]:
    path = split_file(folder)
    if path is None:
        raise DataError(f"{folder} holds no *.csv or *.json; {_ROWS_FIX}")
    if path.suffix == ".csv":
        rows = read_csv_rows(path)
    else:
        rows = read_json_list(path, _ROWS_FIX)
        bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
        if bad is not None:
            raise DataError(f"{path}: entry {bad} is not an object; {_ROWS_FIX}")
    return _checked([row_to_item(r, split) for r in rows], path)


def read_manifest(manifest_dir: Path, split: str) -> list[JSONObject]:
    """The manifest's entries of a split (id and, in the shipped one, category), in order."""
    path = split_file(manifest_dir / split_folder(split))
    if path is None:
        raise DataError(f"no manifest for the {split} split in {manifest_dir} (train/ val/ test/ items.json expected)")
    entries = read_json_list(path, 'an OfficeQA manifest is a JSON list of {"id": ...} objects')
    seen: dict[str, int] = {}
    for n, e in enumerate(entries):
        if not isinstance(e, dict) or not (e.get("uid") or e.get("id")):
            raise DataError(f"{path}: entry {n} has no id")
        check_new_id(path, seen, e.get("uid") or e.get("id"), n)
    return entries


def items_from_full_csv(csv_path: Path, manifest_dir: Path, split: str) -> list[OfficeItem]:
    """The split's questions from the public CSV, in manifest order; a manifest field (category, source_files,
    source_docs) wins over the CSV's when present."""
    by_uid = {str(r.get("uid") or r.get("id") or "").strip(): r for r in read_csv_rows(csv_path)}
    folder = split_folder(split)
    out, missing = [], []
    for entry in read_manifest(manifest_dir, folder):
        uid = str(entry.get("uid") or entry.get("id")).strip()
        row = by_uid.get(uid)
        if row is None:
            missing.append(uid)
            continue
        merged: dict[str, object] = dict(row)
        for key in ("category", "source_files", "source_docs"):
            if entry.get(key):
                merged[key] = entry[key]
        out.append(row_to_item(merged, folder))
    if missing:
        raise DataError(missing_ids_message(missing, folder, manifest_dir, csv_path))
    return out


def items_from_split_files(root: Path, manifest_dir: Path, split: str) -> list[OfficeItem]:
    """The split's questions picked by the manifest, in its order, from the items of every split file in `root`
    (a data folder of split files without officeqa_full.csv); a manifest field wins over the item's, as above."""
    pool = {it["id"]: it for s in SPLITS if split_file(root / s) for it in read_split_folder(root / s, s)}
    folder = split_folder(split)
    out, missing = [], []
    for entry in read_manifest(manifest_dir, folder):
        uid = str(entry.get("uid") or entry.get("id")).strip()
        if uid not in pool:
            missing.append(uid)
            continue
        item = OfficeItem(**{**pool[uid], "split": folder})
        if entry.get("source_files"):
            item["source_files"] = parse_list_field(entry["source_files"])
        if entry.get("source_docs"):
            item["source_docs"] = parse_list_field(entry["source_docs"])
        if entry.get("category"):
            item["category"] = item["task_type"] = str(entry["category"]).strip()
        out.append(item)
    if missing:
        fix = "add them to the split files, or give officeqa_full.csv of databricks/officeqa beside them"
        raise DataError(missing_ids_message(missing, folder, manifest_dir, root / "{train,val,test}", fix))
    return out


def missing_ids_message(missing: list[str], split: str, manifest_dir: Path, data: Path, fix: str = "") -> str:
    """The manifest names questions the given data does not have: say which (a few) and how many."""
    few = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    fix = fix or (
        "give a CSV that holds them (officeqa_full.csv of databricks/officeqa holds every id of the shipped split)"
    )
    return (
        f"{len(missing)} ids of the {split} split in the manifests {manifest_dir} are missing from the given data "
        f"{data} ({few}); {fix}, or give manifests of your own ids with env.manifest_dir"
    )


def task_types(items: Sequence[Mapping[str, object]]) -> list[str]:
    """Distinct task types in first-appearance order, or ["officeqa"]."""
    return list(dict.fromkeys(str(it["task_type"]) for it in items)) or ["officeqa"]


# ---------- the corpus ----------


def _split_dirs(value: Any) -> list[str]:
    """A list as is; a string split on os.pathsep, then on commas (the reference's rule)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [p.strip() for chunk in str(value).split(os.pathsep) for p in chunk.split(",") if p.strip()]


def docs_candidates(docs_dirs: Any, data_dir: Optional[Path], environ: Optional[dict[str, str]] = None) -> list[Path]:
    """Candidate corpus directories in the reference's order: the configured ones, $OFFICEQA_DOCS_DIR, then the
    fallbacks. Relative paths start at the data folder (the reference: its repository root); `~` is expanded."""
    env = os.environ if environ is None else environ
    raw = _split_dirs(docs_dirs) + _split_dirs(env.get(DOCS_ENV))
    base = data_dir if data_dir is not None else Path.cwd()
    fallbacks = [str(base / name) for name in DATA_FALLBACKS] if data_dir is not None else []
    out = []
    for p in raw + fallbacks + list(HOME_FALLBACKS):
        path = Path(os.path.expanduser(p))
        out.append(path if path.is_absolute() else base / path)
    return out


def check_named_dirs(docs_dirs: Any, data_dir: Optional[Path]) -> None:
    """A folder the user named in env.options.docs_dirs must exist: it is never silently skipped (the other
    candidates, the environment variable's and the fallbacks, are looked for and used when they exist)."""
    base = data_dir if data_dir is not None else Path.cwd()
    for raw in _split_dirs(docs_dirs):
        path = Path(os.path.expanduser(raw))
        path = path if path.is_absolute() else base / path
        if not path.is_dir():
            what = "is not a folder" if path.exists() else "does not exist"
            raise DataError(
                f"env.options.docs_dirs names {path}, which {what}; fix the path (relative paths start at "
                f"env.data_dir {base}) or drop it from docs_dirs"
            )


def resolve_docs_roots(candidates: list[Path]) -> list[Path]:
    """Every existing candidate becomes a root (its `transformed/` subfolder when it has one), as a real path,
    duplicates dropped; no root at all is a DataError naming the places looked at."""
    roots: list[Path] = []
    for c in candidates:
        if not c.is_dir():
            continue
        root = (c / "transformed") if (c / "transformed").is_dir() else c
        real = Path(os.path.realpath(root))
        if real not in roots:
            roots.append(real)
    if not roots:
        looked = ", ".join(str(c) for c in candidates) or "(none configured)"
        raise DataError(
            f"no OfficeQA corpus directory found (looked at: {looked}); set env.options.docs_dirs or {DOCS_ENV} to the "
            "parsed bulletins (treasury_bulletins_parsed/ with transformed/ and jsons/)"
        )
    return roots


@dataclass
class CorpusIndex:
    """Every corpus file by basename, in walk order (built once per env actor: the reference walks per item)."""

    roots: list[Path]
    files: list[Path]
    by_name: dict[str, list[Path]]

    @staticmethod
    def build(roots: list[Path]) -> CorpusIndex:
        """Walk every root (links to folders are not followed, as in the reference). A file is kept only when its
        real path is a regular file inside a root: a link out of the corpus (to /etc/passwd, to a gold-answer file)
        is never listed. A link loop is a DataError naming it."""
        files: list[Path] = []
        seen: set[Path] = set()
        for root in roots:
            for dirpath, dirnames, names in os.walk(root):
                dirnames.sort()
                for name in sorted(names):
                    p = _corpus_file(Path(dirpath) / name, roots)
                    if p is not None and p not in seen:
                        seen.add(p)
                        files.append(p)
        by_name: dict[str, list[Path]] = {}
        for p in files:
            by_name.setdefault(p.name, []).append(p)
        return CorpusIndex(roots, files, by_name)

    def candidates(self, source_files: list[str]) -> list[Path]:
        """The files whose basename is one of `source_files` (all files when it is empty), in walk order."""
        if not source_files:
            return list(self.files)
        wanted = set(source_files)
        return [p for p in self.files if p.name in wanted]


def inside(real: Path, roots: list[Path]) -> bool:
    """Whether a real path is one of the (real) roots or lies below one."""
    return any(real == r or str(real).startswith(str(r) + os.sep) for r in roots)


def _corpus_file(path: Path, roots: list[Path]) -> Optional[Path]:
    """The real path of a corpus entry when it is a regular file inside a root; None otherwise (a dangling link,
    a link out of the corpus, a socket)."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DataError(
                f"{path}: a symbolic link loop in the OfficeQA corpus ({e.strerror}); remove or fix that link"
            ) from None
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    real = Path(os.path.realpath(path))
    return real if inside(real, roots) else None
