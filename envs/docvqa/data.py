"""DocVQA data: the reference's runnable split (a CSV per split folder), split aliases, the paper split's facts.

A data folder holds `train/ val/ test/`, each with a CSV (the first `*.csv` by name is read), one row per
question, in the columns the reference reads: questionId (or id), question, answer (or ground_truth,
a Python literal list), image_path, topic (or category), docId, ucsf_document_id, ucsf_document_page_no,
source_split. `python -m skillopt_envs.docvqa.materialize` writes such a folder from the public DocVQA
validation data (the lmms-lab/DocVQA parquet files or the original JSON with its images).
"""

from __future__ import annotations

import ast
import csv
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TypedDict

from skillopt_envs.base import DataError
from skillopt_envs.kit import SPLITS, check_followable, first_data_file, split_name  # noqa: F401 - re-exported

# SkillOpt's paper split, docvqa_validation_10pct: a 10% sample of the 5,349 validation questions
PAPER_SPLIT_NAME = "docvqa_validation_10pct"
PAPER_COUNTS = {"train": 107, "val": 53, "test": 374}
PAPER_SPLIT_DIR = Path(__file__).resolve().parent / "splits"
DEFAULT_TASK_TYPE = "docvqa"
_DOC_PATH = "document_path:"
TEXT_LAYER_SUFFIX = ".txt"  # a page's text layer, beside its image: <image stem>.txt


def split_folder(split: str) -> str:
    return split_name(split, "DocVQA")


def split_csv(folder: Path) -> Optional[Path]:
    """The first *.csv of a split folder by name; a listed name that cannot be followed is a DataError."""
    return first_data_file(folder, "*.csv")


def parse_answers(cell: Optional[str]) -> list[str]:
    """A CSV answer cell: a Python list literal -> its stripped non-empty elements; any other literal (a tuple too:
    the reference splits lists only) -> one element, its str(); unparsable text -> [the raw text]; empty -> []."""
    raw = (cell or "").strip()
    if not raw:
        return []
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return [raw]
    if isinstance(value, list):
        return [s for s in (str(v).strip() for v in value) if s]
    return [str(value)]


def split_question(text: str) -> tuple[str, str]:
    """(question, fallback image path): a question holding `document_path:` names its image after it."""
    if _DOC_PATH in text:
        q, _, path = text.partition(_DOC_PATH)
        return q.strip(), path.strip()
    return text, ""


class PageRef(TypedDict):
    """Where a page image sits inside a parquet file of the public data: the file, its row group and row."""

    parquet: str
    row_group: int
    row: int


class DocVQAItem(TypedDict, total=False):
    """One question as the reference normalises it. `page_source` (a page inside a parquet file) and `text_path`
    (the page's original OCR file) come with the public data read in place, never from a CSV."""

    id: str
    question: str
    answer: str
    answers: list[str]
    task_type: str
    subtask: str
    image_paths: list[str]
    image_path: str
    page_source: Optional[PageRef]
    text_path: str
    questionId: str
    docId: str
    ucsf_document_id: str
    ucsf_document_page_no: str
    source_split: str


def row_to_item(row: dict[str, Any], cwd: Optional[Path] = None) -> DocVQAItem:
    """One CSV row as the reference normalises it. A relative image path resolves against `cwd` (the reference
    uses the process's working directory; the benchmark passes env.options.image_root, else the data folder)."""
    qid = str(row.get("questionId") or row.get("id") or "").strip()
    question, fallback = split_question(str(row.get("question") or ""))
    answer_cell = row.get("answer") or row.get("ground_truth")  # an empty cell counts as absent
    answers = parse_answers(answer_cell)
    image = (row.get("image_path") or "").strip() or fallback
    if image and not os.path.isabs(image):
        image = str((cwd or Path.cwd()) / image)
    topic = (row.get("topic") or "").strip() or (row.get("category") or "").strip() or DEFAULT_TASK_TYPE
    return {
        "id": qid,
        "question": question,
        "answer": answers[0] if answers else "",
        "answers": answers,
        "task_type": topic,
        "subtask": topic,
        "image_paths": [image] if image else [],
        "image_path": image,
        "questionId": qid,
        "docId": str(row.get("docId") or ""),
        "ucsf_document_id": str(row.get("ucsf_document_id") or ""),
        "ucsf_document_page_no": str(row.get("ucsf_document_page_no") or ""),
        "source_split": str(row.get("source_split") or ""),
    }


def read_csv_items(path: Path, cwd: Optional[Path] = None) -> list[DocVQAItem]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except UnicodeDecodeError:
        raise DataError(f"{path} is not a UTF-8 CSV file") from None
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror or e}); check the file's permissions") from None
    except csv.Error as e:
        raise DataError(f"{path} is not a readable CSV file: {e}") from None
    items = []
    for n, row in enumerate(rows, start=2):
        it = row_to_item(row, cwd)
        if not it["id"]:
            raise DataError(f"{path}: row {n} has no questionId (or id); each row needs one")
        if not it["image_path"]:
            raise DataError(
                f"{path}: row {n} (id {it['id']}) names no image (image_path, or document_path: in the question)"
            )
        items.append(it)
    return items


def load_split_items(root: Path, split: str, cwd: Optional[Path] = None) -> list[DocVQAItem]:
    folder = root / split_folder(split)
    path = split_csv(folder)
    if path is None:
        raise DataError(
            f"{folder} holds no *.csv; a DocVQA data folder holds train/ val/ test/ with one CSV each "
            "(python -m skillopt_envs.docvqa.materialize writes them from the public validation data)"
        )
    return read_csv_items(path, cwd)


def check_images(items: list[DocVQAItem], split: str) -> None:
    """Every image exists, else one line naming the first missing path, the count and the fix."""
    for it in items:
        check_followable(Path(it["image_path"]))
    missing = [it["image_path"] for it in items if not os.path.isfile(it["image_path"])]
    if missing:
        raise DataError(
            f"{len(missing)} of {len(items)} page images of the DocVQA {split} split are missing (first: {missing[0]}); "
            "write them with python -m skillopt_envs.docvqa.materialize, or run from the folder the CSV's relative "
            "image paths start from (env.options.image_root names it)"
        )


class PageImageError(OSError):
    """A page image file that is there but does not decode as an image."""


# what Pillow raises for bytes that are not a well-formed image (its PNG reader reports bad chunks as SyntaxError)
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, struct.error)


def check_page_image(path: str) -> None:
    """Decode the page's header and check its structure (a PNG's chunk checksums) before the page is sent: a corrupt
    page is a data error naming the file, never a wrong answer no target could get right. A file that cannot be
    read at all raises its own OSError."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            width, height = im.size
            im.verify()
    except Image.DecompressionBombError:
        raise PageImageError("too many pixels to decode safely") from None
    except _DECODE_ERRORS as e:
        if isinstance(e, OSError) and e.errno is not None:
            raise  # missing or unreadable: not a decoding problem
        raise PageImageError(f"not a readable image ({type(e).__name__}: {e})") from None
    if width < 1 or height < 1:
        raise PageImageError(f"an image of {width} x {height} pixels")


def task_types(items: list[DocVQAItem]) -> list[str]:
    """Distinct task types in first-appearance order, or the default one."""
    seen: dict[str, None] = {}
    for it in items:
        seen.setdefault(it["task_type"], None)
    return list(seen) or [DEFAULT_TASK_TYPE]


def text_layer_path(image_path: str) -> Path:
    return Path(image_path).with_suffix(TEXT_LAYER_SUFFIX)


@dataclass(frozen=True)
class SplitSizes:
    sizes: dict[str, int]

    @property
    def is_paper(self) -> bool:
        return self.sizes == PAPER_COUNTS

    def text(self) -> str:
        return "/".join(str(self.sizes.get(s, 0)) for s in SPLITS)
