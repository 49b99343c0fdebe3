"""The public DocVQA validation data read in place: the lmms-lab/DocVQA parquet files or the original JSON.

The questions are read where the split is planned (the driver): from parquet, every column but the image;
from JSON, the records. A task then names where its page is, never its bytes. For parquet the page is inside
the file: the env actor that first needs a page writes out the pages of its row group into a local cache
(`~/.cache/skillopt_ray/docvqa_pages/`), once per node, and reads the file from there. Which questions form
the splits comes from an id manifest folder (train/ val/ test/ items.json with `id` or `questionId` entries):
the paper's split shipped in `splits/` (SkillOpt's data/docvqa_id_split), or env.manifest_dir.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.base import DataError, check_new_id, read_json_list
from skillopt_envs.docvqa.data import DocVQAItem, PageRef, check_followable

PAGE_CACHE = Path.home() / ".cache" / "skillopt_ray" / "docvqa_pages"
_EXTRACT_LOCK = threading.Lock()  # one row group written out at a time per process


@dataclass(frozen=True)
class Sources:
    parquets: tuple[Path, ...]
    jsons: tuple[Path, ...]

    def __bool__(self) -> bool:
        return bool(self.parquets or self.jsons)

    def describe(self) -> str:
        kinds = []
        if self.parquets:
            kinds.append(f"{len(self.parquets)} parquet file{'s' if len(self.parquets) > 1 else ''}")
        if self.jsons:
            kinds.append(", ".join(p.name for p in self.jsons))
        return " and ".join(kinds)


def _is_docvqa_json(path: Path) -> bool:
    """The file starts like a DocVQA JSON file; one that cannot be read is one line naming it, never passed over."""
    check_followable(path)
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror or e}); check the file's permissions") from None
    return '"data"' in head and "questionId" in head


def find_sources(root: Path) -> Sources:
    """Parquet files anywhere under root; DocVQA JSON files ({"data": [...]} records) at its top level."""
    parquets = tuple(sorted(root.rglob("*.parquet")))
    for p in parquets:
        check_followable(p)
    jsons = tuple(p for p in sorted(root.glob("*.json")) if _is_docvqa_json(p))
    return Sources(parquets, jsons)


def _topic(types: Any) -> str:
    if isinstance(types, (list, tuple)):
        return "|".join(str(t) for t in types) or "docvqa"
    return str(types or "docvqa")


def _item(rec: dict[str, Any], image_path: str, page: Optional[PageRef], text_path: str) -> DocVQAItem:
    answers = [s for s in (str(a).strip() for a in rec.get("answers") or []) if s]
    qid = str(rec["questionId"]).strip()
    topic = _topic(rec.get("question_types"))
    return {
        "id": qid,
        "question": str(rec.get("question") or ""),
        "answer": answers[0] if answers else "",
        "answers": answers,
        "task_type": topic,
        "subtask": topic,
        "image_path": image_path,
        "image_paths": [image_path] if image_path else [],
        "page_source": page,  # parquet pages: where the env actor finds the bytes
        "text_path": text_path,
        "questionId": qid,
        "docId": str(rec.get("docId") or ""),
        "ucsf_document_id": str(rec.get("ucsf_document_id") or ""),
        "ucsf_document_page_no": str(rec.get("ucsf_document_page_no") or ""),
        "source_split": str(rec.get("data_split") or "validation"),
    }


def _parquet_file(pq: Any, path: Path) -> Any:
    try:
        return pq.ParquetFile(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError, its IO errors are OSErrors
        raise DataError(
            f"{path} is not a readable parquet file ({str(e).strip().splitlines()[0][:160]}); download it again"
        ) from None


def _json_doc(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror or e}); check the file's permissions") from None
    except ValueError as e:  # invalid JSON or UTF-8
        raise DataError(f"{path} is not a readable DocVQA JSON file ({str(e)[:160]}); download it again") from None


def read_pool(sources: Sources) -> dict[str, DocVQAItem]:
    """Every question of the sources by questionId, without image bytes."""
    pool: dict[str, DocVQAItem] = {}
    if sources.parquets:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError("reading the DocVQA parquet files needs pyarrow: pip install pyarrow") from None
        for path in sources.parquets:
            f = _parquet_file(pq, path)
            cols = [c for c in f.schema_arrow.names if c != "image"]
            if "questionId" not in cols or "image" not in f.schema_arrow.names:
                raise DataError(f"{path} is not a DocVQA parquet file (it needs questionId and image columns)")
            for g in range(f.num_row_groups):
                for i, rec in enumerate(f.read_row_group(g, columns=cols).to_pylist()):
                    page: PageRef = {"parquet": str(path), "row_group": g, "row": i}
                    it = _item(rec, "", page, "")
                    it["image_path"] = f"q{it['id']}_d{it['docId']}.png"  # its name once written out
                    pool[it["id"]] = it
    for path in sources.jsons:
        doc = _json_doc(path)
        for rec in doc.get("data", []) if isinstance(doc, dict) else []:
            image = path.parent / str(rec.get("image") or "")
            ocr = path.parent / "ocr" / f"{image.stem}.json"
            pool[str(rec["questionId"]).strip()] = _item(rec, str(image), None, str(ocr) if ocr.is_file() else "")
    return pool


def read_id_manifest(folder: Path, split: str) -> list[str]:
    files = sorted((folder / split).glob("*.json")) if (folder / split).is_dir() else []
    if not files:
        raise DataError(
            f"{folder / split} holds no items.json; env.manifest_dir must hold train/ val/ test/ items.json "
            "with the question ids (SkillOpt's data/docvqa_id_split)"
        )
    entries = read_json_list(
        files[0], 'a DocVQA id manifest is a JSON list of {"questionId": ...} (or {"id": ...}) objects'
    )
    ids: list[str] = []
    seen: dict[str, int] = {}
    for n, e in enumerate(entries):
        qid = e.get("questionId", e.get("id")) if isinstance(e, dict) else None
        if qid is None:
            raise DataError(f"{files[0]}: entry {n} ({str(e)[:60]}) has no id or questionId")
        check_new_id(files[0], seen, str(qid).strip(), n)
        ids.append(str(qid).strip())
    return ids


def _cache_dir(parquet: Path, cache_root: Path) -> Path:
    st = parquet.stat()
    tag = hashlib.sha256(f"{parquet.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_root / f"{parquet.stem}-{tag}"


def page_file(page: PageRef, name: str, cache_root: Optional[Path] = None) -> Path:
    """The page image as a local file: written out with the rest of its row group on first use (on this node)."""
    folder = _cache_dir(Path(page["parquet"]), cache_root or PAGE_CACHE)
    target = folder / name
    done = folder / f".group{page['row_group']}.done"
    if done.exists():
        return target
    with _EXTRACT_LOCK:
        if done.exists():
            return target
        import pyarrow.parquet as pq

        table = pq.ParquetFile(page["parquet"]).read_row_group(
            page["row_group"], columns=["questionId", "docId", "image"]
        )
        folder.mkdir(parents=True, exist_ok=True)
        for rec in table.to_pylist():
            data = (rec.get("image") or {}).get("bytes") if isinstance(rec.get("image"), dict) else None
            if not data:
                continue
            out = folder / f"q{str(rec['questionId']).strip()}_d{rec.get('docId') or ''}.png"
            fd, tmp = tempfile.mkstemp(dir=str(folder), prefix=".page-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, out)  # a reader never sees half a page
        done.write_text("")
    return target


def ocr_text(path: Path) -> str:
    """The lines of an original DocVQA OCR file, in the order given."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    lines = []
    for page in doc.get("recognitionResults", []) if isinstance(doc, dict) else []:
        lines += [str(ln.get("text", "")) for ln in page.get("lines", []) if isinstance(ln, dict)]
    return "\n".join(lines)
