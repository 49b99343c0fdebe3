"""LiveMathematicianBench data: raw upstream rows and their normalisation, normalised split folders, id manifests.

Two layouts are read:
- a split folder (the reference's `split_dir` mode): `<data_dir>/{train,val,test}/`, the first `*.json` of each
  (a JSON array) holding items already in the normalised shape, used exactly as stored;
- raw upstream files (`qa_<YYYYMM>_final.json`, anywhere under `<data_dir>`), each row normalised as the
  reference's ratio-mode loader does; an id manifest then picks each split's items, in manifest order: the paper's
  split shipped in `splits/` (SkillOpt's `data/livemathematicianbench_id_split`), or `env.manifest_dir`.

An item whose choices cannot tell a right answer from a wrong one (fewer than two choices, a label or a text given
twice, a correct label that is none of the choices) is still scored by the reference; here `item_defect` names the
problem and the episode is a data error, counted and unscored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TypedDict

from skillopt_envs.base import DataError, check_new_id, read_json_list
from skillopt_envs.jsontypes import JSONObject, JSONValue, as_list
from skillopt_envs.kit import SPLITS, check_followable, first_data_file, manifest_ids, split_name  # noqa: F401

# SkillOpt's paper split: 177 items of the four monthly files, split 35 / 17 / 125
PAPER_COUNTS = {"train": 35, "val": 17, "test": 125}
PAPER_MONTHS = {
    "train": {"202602": 13, "202512": 10, "202601": 7, "202511": 5},
    "val": {"202602": 3, "202512": 5, "202601": 7, "202511": 2},
    "test": {"202602": 34, "202512": 37, "202601": 32, "202511": 22},
}
PAPER_SPLIT_DIR = Path(__file__).resolve().parent / "splits"
DEFAULT_TASK_TYPE = "math_mcq"
LETTERS = "ABCDEFG"
RAW_FILE = re.compile(r"^qa_(.*)_final\.json$")
ITEM_KEYS = ("id", "question", "choices", "correct_choice")
LOADED_FROM = "loaded_from"  # the file an item was read from, added on reading (for messages naming it)


def split_folder(split: str) -> str:
    return split_name(split, "LiveMathematicianBench")


def split_file(folder: Path) -> Optional[Path]:
    """The first *.json of a split folder by name; a listed name that cannot be followed is a DataError."""
    return first_data_file(folder, "*.json")


# ---------- normalisation (the reference's ratio-mode loader) ----------


def normalize_label(value: Any) -> str:
    """Strip, upper-case, then drop trailing `.`, `)` and `:` characters."""
    return str(value if value is not None else "").strip().upper().rstrip(".):")


def _letter(i: int) -> str:
    return LETTERS[i] if i < len(LETTERS) else chr(ord("A") + i)


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


class Choice(TypedDict):
    """One answer choice: its label (A, B, ...) and its text."""

    label: str
    text: str


def coerce_choices(raw: Any) -> list[Choice]:
    """Choices as [{label, text}]: a list labels element i by its own `label` (normalised) or else the i-th letter
    (a non-dict element is its text); a dict's keys, sorted, are the labels exactly as given (the reference does not
    normalise them: `a` stays lower-case). Entries with empty text are dropped after labelling, so gaps in the
    labels are possible."""
    out: list[Choice] = []
    if isinstance(raw, dict):
        for key in sorted(raw, key=str):
            out.append({"label": str(key), "text": _text(raw[key])})
    elif isinstance(raw, list):
        for i, el in enumerate(raw):
            if isinstance(el, dict):
                label = normalize_label(el.get("label")) or _letter(i)
                text = _text(el.get("text") or el.get("content"))
            else:
                label, text = _letter(i), _text(el)
            out.append({"label": label, "text": text})
    return [c for c in out if c["text"]]


def _letter_order(choice: Choice) -> tuple[int, str]:
    label = choice["label"]
    return (LETTERS.index(label), "") if len(label) == 1 and label in LETTERS else (len(LETTERS), label)


def coerce_correct(raw: Any, choices: list[Choice]) -> tuple[Choice, list[Choice]]:
    """The correct choice {label, text}, and the choices with it appended (re-sorted A..G) when it has text of its
    own but its label is not among them. Missing text is taken from the choice with that label."""
    if isinstance(raw, dict):
        label, text = normalize_label(raw.get("label")), _text(raw.get("text"))
    else:
        label, text = normalize_label(raw), ""
    by_label = {c["label"]: c["text"] for c in choices}
    if not text:  # the reference fills it from the choice whose label, normalised, is the correct one's
        by_normal = {normalize_label(c["label"]): c["text"] for c in reversed(choices)}
        text = by_label.get(label) or by_normal.get(label, "")
    elif label and label not in by_label:
        choices = sorted([*choices, {"label": label, "text": text}], key=_letter_order)
    return {"label": label, "text": text}, choices


def _theorem_types(raw: Any) -> list[str]:
    values = raw if isinstance(raw, list) else [raw]
    return [s for s in (_text(v) for v in values if v is not None) if s]


def normalize_row(row: JSONObject, index: int, month: str = "") -> Optional[JSONObject]:
    """One raw upstream row in the normalised shape, or None when it lacks a question, choices or a correct label.

    `index` is the row's position in its file (`no` defaults to index + 1); `month` is used when the row has none.
    """
    nested = row.get("mcq")
    mcq: JSONObject = nested if isinstance(nested, dict) else row
    question = _text(mcq.get("question"))
    choices = coerce_choices(mcq.get("choices"))
    correct, choices = coerce_correct(mcq.get("correct_choice"), choices)
    if not (question and choices and correct["label"]):
        return None
    month = _text(row.get("month")) or month
    no = row.get("no")
    no = index + 1 if no in (None, "") else no
    if isinstance(no, str) and no.strip().isdigit():
        no = int(no.strip())
    return {
        "id": f"{month}:{no}" if month else str(no),
        "question": question,
        "choices": [{"label": c["label"], "text": c["text"]} for c in choices],
        "correct_choice": {"label": correct["label"], "text": correct["text"]},
        "theorem_type": _theorem_types(row.get("theorem_type")),
        "theorem": _text(row.get("theorem")),
        "sketch": _text(row.get("sketch")),
        "paper_link": _text(row.get("paper_link")),
        "month": month,
        "no": no,
    }


def raw_files(path: Path) -> list[Path]:
    """A `qa_*_final.json` file, or every one under a folder (sorted, each once); one that cannot be followed (a
    symlink loop, a link to nothing) is a DataError naming it, never silently left out."""
    if path.is_file():
        return [path]
    found: set[Path] = set()
    for p in path.rglob("qa_*_final.json"):
        check_followable(p)
        if p.is_file():
            found.add(p.resolve())
    return sorted(found)


def month_of(path: Path) -> str:
    """The month a raw file's name carries (`qa_202602_final.json` -> `202602`), for rows without a month."""
    m = RAW_FILE.match(path.name)
    return m.group(1) if m else ""


_RAW_FIX = (
    "a LiveMathematicianBench raw file is a JSON list of rows with question, choices and correct_choice (under mcq)"
)


def load_raw_items(path: Path) -> list[JSONObject]:
    """Every usable row of the raw files under `path`, normalised; an id seen twice is an error."""
    items: list[JSONObject] = []
    seen: dict[str, int] = {}
    for f in raw_files(path):
        for i, row in enumerate(read_json_list(f, _RAW_FIX)):
            if not isinstance(row, dict):
                raise DataError(f"{f}: row {i} is a JSON {type(row).__name__}, not an object; {_RAW_FIX}")
            item = normalize_row(row, i, month_of(f))
            if item is not None:
                check_new_id(f, seen, item["id"], len(items))
                items.append({**item, LOADED_FROM: str(f)})
    return items


# ---------- normalised split folders ----------

_ITEMS_FIX = (
    "a LiveMathematicianBench split file is a JSON list of normalised items {id, question, choices: [{label, text}], "
    "correct_choice: {label, text}, theorem_type, ...}; raw upstream files (qa_*_final.json) go in env.data_dir "
    "with an id manifest in env.manifest_dir"
)


def check_item(path: Path, n: int, it: object) -> JSONObject:
    """A stored item, checked for the fields an episode reads (it is otherwise used exactly as stored)."""
    if not isinstance(it, dict) or not all(k in it for k in ITEM_KEYS):
        raise DataError(f"{path}: item {n} ({str(it)[:80]}) lacks one of {', '.join(ITEM_KEYS)}; {_ITEMS_FIX}")
    ch, cc = it["choices"], it["correct_choice"]
    if not isinstance(ch, list) or not ch or not all(isinstance(c, dict) and "label" in c and "text" in c for c in ch):
        raise DataError(f"{path}: item {it['id']!r} needs choices as a non-empty list of {{label, text}}; {_ITEMS_FIX}")
    if not isinstance(cc, dict) or "label" not in cc:
        raise DataError(f"{path}: item {it['id']!r} needs correct_choice as {{label, text}}; {_ITEMS_FIX}")
    return it


def read_items(path: Path) -> list[JSONObject]:
    """A split file's items as stored, each with the file it came from added (LOADED_FROM)."""
    items = read_json_list(path, _ITEMS_FIX)
    seen: dict[str, int] = {}
    for n, it in enumerate(items):
        check_item(path, n, it)
        check_new_id(path, seen, it["id"], n)
    return [{**it, LOADED_FROM: str(path)} for it in items]


def has_split_folders(root: Path) -> bool:
    return any(split_file(root / s) is not None for s in SPLITS)


# ---------- id manifests ----------

_MANIFEST_FIX = 'a LiveMathematicianBench manifest is a JSON list of {"id": "<month>:<no>", ...} objects'


def read_manifest(manifest_dir: Path, split: str) -> list[str]:
    folder = manifest_dir / split_folder(split)
    return manifest_ids(folder, split_file(folder), split, '{"id": "<month>:<no>"}', _MANIFEST_FIX)


def stated_counts(manifest_dir: Path) -> Optional[dict[str, int]]:
    """The split sizes a manifest folder's split_manifest.json states (`counts`), or None when it states none."""
    path = manifest_dir / "split_manifest.json"
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    counts = facts.get("counts") if isinstance(facts, dict) else None
    if not isinstance(counts, dict) or not all(isinstance(counts.get(s), int) for s in SPLITS):
        return None
    return {s: int(counts[s]) for s in SPLITS}


@dataclass(frozen=True)
class SplitSizes:
    counts: dict[str, int]

    def text(self) -> str:
        return "/".join(str(self.counts.get(s, 0)) for s in SPLITS)

    @property
    def is_paper(self) -> bool:
        return all(self.counts.get(s) == PAPER_COUNTS[s] for s in SPLITS)


def _first_repeat(values: list[str]) -> str:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return ""


def item_defect(item: Mapping[str, JSONValue]) -> str:
    """What keeps an item from being a fair multiple-choice question, or '' for a sound one. Labels are compared
    normalised and texts ignoring case, as the scorer compares them."""
    choices = [c for c in as_list(item.get("choices")) if isinstance(c, dict)]
    labels = [normalize_label(c.get("label")) for c in choices]
    if len(choices) < 2:
        return (
            f"it has {len(choices)} choice{'' if len(choices) == 1 else 's'}; a multiple-choice item needs two or more"
        )
    if len(set(labels)) == 1:
        return f"every choice is labelled {labels[0]!r}"
    label = _first_repeat(labels)
    if label:
        return f"the label {label!r} is given to {labels.count(label)} choices"
    text = _first_repeat([_text(c.get("text")).lower() for c in choices])
    if text:
        return f"two choices have the same text ({text[:60]!r})"
    cc = item.get("correct_choice")
    correct = normalize_label(cc.get("label") if isinstance(cc, dict) else cc)
    if correct not in labels:
        return f"its correct label {correct!r} is none of its choices' labels ({', '.join(labels)})"
    return ""


def task_type_of(item: Mapping[str, JSONValue]) -> str:
    """The item's first theorem type, else math_mcq."""
    raw = item.get("theorem_type")
    types = [raw] if isinstance(raw, str) else as_list(raw)
    first = next((str(t) for t in types if str(t).strip()), "")
    return first or DEFAULT_TASK_TYPE
