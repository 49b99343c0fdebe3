"""Write a runnable DocVQA data folder (train/ val/ test/ CSVs and the page images) from the public data.

Sources, as downloaded by the user (this command fetches nothing):
- the lmms-lab/DocVQA parquet files (config DocVQA, split validation): the images are bytes inside the
  parquet; they are written out as `images/q<questionId>_d<docId>.<ext>`, one row group at a time;
- the original DocVQA JSON (`val_v1.0.json`: {"data": [...]} with `image` paths relative to the JSON's
  folder); the images are copied, and an `ocr/<image stem>.json` beside them becomes the page's text layer.

The splits come from an id manifest (`--manifest`): a folder with train/ val/ test/ items.json listing
`{"id": ...}` (or `questionId`) entries; by default the paper's split shipped with this package (`splits/`,
SkillOpt's data/docvqa_id_split, 107/53/374). The CSVs use the columns the reference reads, with image paths
relative to the output folder.

    python -m skillopt_envs.docvqa.materialize --source DocVQA/validation-*.parquet --out data/docvqa
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skillopt_envs.base import DataError
from skillopt_envs.docvqa.data import PAPER_SPLIT_DIR, SPLITS, TEXT_LAYER_SUFFIX, check_followable

COLUMNS = (
    "questionId",
    "question",
    "answer",
    "image_path",
    "topic",
    "docId",
    "ucsf_document_id",
    "ucsf_document_page_no",
    "source_split",
)


def read_id_manifest(folder: Path) -> dict[str, str]:
    """questionId -> split, from train/ val/ test/ items.json (the first *.json of each folder by name)."""
    out: dict[str, str] = {}
    for split in SPLITS:
        files = sorted((folder / split).glob("*.json")) if (folder / split).is_dir() else []
        if not files:
            raise DataError(
                f"{folder / split} holds no items.json; a manifest folder holds train/ val/ test/ items.json"
            )
        try:
            entries = json.loads(files[0].read_text(encoding="utf-8"))
        except ValueError as e:
            raise DataError(f"{files[0]} is not valid JSON: {e}") from None
        for n, entry in enumerate(entries if isinstance(entries, list) else []):
            qid = entry.get("questionId", entry.get("id")) if isinstance(entry, dict) else None
            if qid is None:
                raise DataError(f"{files[0]}: entry {n} has no id or questionId")
            out[str(qid).strip()] = split
    return out


def _topic(types: Any) -> str:
    if isinstance(types, (list, tuple)):
        return "|".join(str(t) for t in types) or "docvqa"
    return str(types or "docvqa")


def _image_ext(data: bytes) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    if data[:3] == b"\xff\xd8\xff":
        return ".jpg"
    return ".png"


def _row(rec: dict[str, Any], rel_image: str) -> dict[str, str]:
    answers = [str(a) for a in rec.get("answers") or []]
    return {
        "questionId": str(rec["questionId"]),
        "question": str(rec.get("question") or ""),
        "answer": repr(answers),
        "image_path": rel_image,
        "topic": _topic(rec.get("question_types")),
        "docId": str(rec.get("docId") or ""),
        "ucsf_document_id": str(rec.get("ucsf_document_id") or ""),
        "ucsf_document_page_no": str(rec.get("ucsf_document_page_no") or ""),
        "source_split": str(rec.get("data_split") or "validation"),
    }


def parquet_records(paths: list[Path], wanted: set[str]) -> Iterator[tuple[dict[str, Any], bytes]]:
    """(record, image bytes) of the wanted questions, reading one row group at a time."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError("reading parquet needs pyarrow: pip install pyarrow") from None
    for path in paths:
        try:
            f = pq.ParquetFile(path)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise DataError(f"{path} is not a readable parquet file ({str(e).strip().splitlines()[0][:160]})") from None
        for g in range(f.num_row_groups):
            table = f.read_row_group(g)
            ids = [str(x) for x in table.column("questionId").to_pylist()]
            keep = [i for i, q in enumerate(ids) if q in wanted]
            if not keep:
                continue
            for rec in table.take(keep).to_pylist():
                image = rec.pop("image", None) or {}
                data = image.get("bytes") if isinstance(image, dict) else None
                if not data:
                    raise DataError(f"{path}: question {rec.get('questionId')} has no image bytes in its row")
                yield rec, data


def json_records(path: Path, wanted: set[str]) -> Iterator[tuple[dict[str, Any], Path]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        raise DataError(f"{path} is not valid JSON: {e}") from None
    data = doc.get("data") if isinstance(doc, dict) else doc
    if not isinstance(data, list):
        raise DataError(f"{path} holds no DocVQA records (a JSON object with a `data` list)")
    for rec in data:
        if str(rec.get("questionId")) in wanted:
            image = path.parent / str(rec.get("image") or "")
            if not image.is_file():
                raise DataError(
                    f"page image {image} of question {rec.get('questionId')} is missing; unpack the DocVQA "
                    f"validation images (documents/) beside {path.name}"
                )
            yield rec, image


def ocr_text(ocr_json: Path) -> str:
    """The lines of an original DocVQA OCR file, top to bottom as given."""
    try:
        doc = json.loads(ocr_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    lines = []
    for page in doc.get("recognitionResults", []) if isinstance(doc, dict) else []:
        lines += [str(ln.get("text", "")) for ln in page.get("lines", []) if isinstance(ln, dict)]
    return "\n".join(lines)


def check_sources(sources: list[Path]) -> None:
    """Each --source is a .parquet or .json file that can be opened: one line naming the first that is not."""
    for path in sources:
        check_followable(path)
        if not path.is_file():
            raise DataError(f"--source {path} does not exist (or is not a file); name the downloaded files")
        if path.suffix not in (".parquet", ".json"):
            raise DataError(f"--source {path} is neither a .parquet nor a .json file")


def materialize(sources: list[Path], manifest: Path, out: Path) -> dict[str, int]:
    check_sources(sources)
    split_of = read_id_manifest(manifest)
    rows: dict[str, list[dict[str, str]]] = {s: [] for s in SPLITS}
    (out / "images").mkdir(parents=True, exist_ok=True)
    parquets = [p for p in sources if p.suffix == ".parquet"]
    jsons = [p for p in sources if p.suffix == ".json"]
    if not parquets and not jsons:
        raise DataError("no --source given: name the lmms-lab/DocVQA parquet files or the DocVQA val_v1.0.json")
    for rec, data in parquet_records(parquets, set(split_of)):
        qid = str(rec["questionId"])
        rel = f"images/q{qid}_d{rec.get('docId')}{_image_ext(data)}"
        (out / rel).write_bytes(data)
        rows[split_of[qid]].append(_row(rec, rel))
    for path in jsons:
        for rec, image in json_records(path, set(split_of)):
            qid = str(rec["questionId"])
            rel = f"images/q{qid}_d{rec.get('docId')}{image.suffix or '.png'}"
            shutil.copyfile(image, out / rel)
            text = ocr_text(path.parent / "ocr" / f"{image.stem}.json")
            if text:
                (out / rel).with_suffix(TEXT_LAYER_SUFFIX).write_text(text + "\n", encoding="utf-8")
            rows[split_of[qid]].append(_row(rec, rel))
    found = {r["questionId"] for rs in rows.values() for r in rs}
    missing = [q for q in split_of if q not in found]
    if missing:
        raise DataError(
            f"{len(missing)} of {len(split_of)} manifest questions are not in the sources (first: {missing[0]}); "
            "give every file of the validation split"
        )
    order = {q: i for i, q in enumerate(split_of)}
    for split, rs in rows.items():
        rs.sort(key=lambda r: order[r["questionId"]])  # manifest order
        (out / split).mkdir(parents=True, exist_ok=True)
        with (out / split / f"{split}.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rs)
    return {s: len(rs) for s, rs in rows.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", nargs="+", required=True, type=Path, help="parquet files and/or val_v1.0.json")
    ap.add_argument(
        "--manifest",
        default=PAPER_SPLIT_DIR,
        type=Path,
        help="id manifest folder with train/ val/ test/ items.json (default: the paper's split, shipped)",
    )
    ap.add_argument("--out", required=True, type=Path, help="the data folder to write (env.data_dir / DOCVQA_DATA)")
    a = ap.parse_args(argv)
    try:
        counts = materialize(a.source, a.manifest, a.out)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # what the checks did not foresee (a full disk, an unreadable image): still one line
        print(f"error: {e.filename or a.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {'/'.join(str(counts[s]) for s in SPLITS)} train/val/test questions to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
