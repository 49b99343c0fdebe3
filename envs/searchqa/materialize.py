"""Write SearchQA items for an id split: `python -m skillopt_envs.searchqa.materialize --source FILES... --out DIR`.

The sources are the files of the Hugging Face dataset lucadiliello/searchqa (parquet, or a JSON / JSON Lines
export), whose rows carry `key`, `question`, `context` and `answers`. The ids of the split manifests (by default
SkillOpt's paper split shipped in envs/searchqa/splits) are looked up by `key`; the output is
`DIR/{train,val,test}/items.json` with `{id, question, context, answers}` in manifest order, plus
`DIR/split_manifest.json`. Ids listed in two splits, a key found twice in the sources and ids found nowhere
are errors (exit 2), named with the file.

    huggingface-cli download lucadiliello/searchqa --repo-type dataset --local-dir ~/data/hf-searchqa
    python -m skillopt_envs.searchqa.materialize --source ~/data/hf-searchqa --out ~/data/searchqa
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from skillopt_envs.base import DataError
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.searchqa import data as qa_data

_FIELDS = ("key", "question", "context", "answers")


def _source_files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.suffix in (".parquet", ".jsonl", ".json") and f.is_file())
        elif p.is_file():
            out.append(p)
        else:
            raise DataError(f"source {p} does not exist")
    if not out:
        raise DataError(f"no .parquet, .jsonl or .json files in {', '.join(paths)}")
    return out


def _rows(path: Path) -> Iterator[JSONObject]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        f = pq.ParquetFile(path)
        missing = [c for c in _FIELDS if c not in f.schema_arrow.names]
        if missing:
            raise DataError(f"{path} lacks the column(s) {', '.join(missing)}")
        for batch in f.iter_batches(columns=list(_FIELDS), batch_size=2048):
            yield from batch.to_pylist()
    elif path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except ValueError as e:
                        raise DataError(f"{path}:{n} is not valid JSON: {e}") from None
    else:
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise DataError(f"{path} is not valid JSON: {e}") from None
        if not isinstance(rows, list):
            raise DataError(f"{path} must hold a JSON list of rows")
        yield from rows


def materialize(sources: list[str], out: Path, manifest_dir: Path = qa_data.PAPER_SPLIT_DIR) -> dict[str, int]:
    ids = {s: qa_data.read_manifest(manifest_dir, s) for s in qa_data.SPLITS}
    where: dict[str, str] = {}
    for s, lst in ids.items():
        for i in lst:
            if i in where:
                raise DataError(f"id {i} is listed in both the {where[i]} and the {s} split of {manifest_dir}")
            where[i] = s
    found: dict[str, JSONObject] = {}
    seen_in: dict[str, Path] = {}
    files = _source_files(sources)
    for path in files:
        for row in _rows(path):
            if not isinstance(row, dict) or "key" not in row:
                raise DataError(f"{path}: a row without a key field ({str(row)[:80]})")
            key = str(row["key"])
            if key in seen_in:
                raise DataError(f"{path}: key {key} appears twice in the sources (also in {seen_in[key]})")
            seen_in[key] = path
            if key in where:
                answers = row.get("answers")
                found[key] = {
                    "id": key,
                    "question": row.get("question"),
                    "context": row.get("context"),
                    "answers": list(answers) if isinstance(answers, (list, tuple)) else [answers],
                }
    missing = [i for i in where if i not in found]
    if missing:
        raise DataError(
            f"{len(missing)} of the {len(where)} ids of {manifest_dir} are not in the sources (first: {missing[0]}); "
            "give every file of lucadiliello/searchqa as --source"
        )
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for s, lst in ids.items():
        (out / s).mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out / s, prefix=".items-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump([found[i] for i in lst], fh, ensure_ascii=False, indent=1)
        os.replace(tmp, out / s / "items.json")
        counts[s] = len(lst)
    (out / "split_manifest.json").write_text(
        json.dumps(
            {
                "benchmark": "SearchQA",
                "source_dataset": "lucadiliello/searchqa",
                "id_field": "key",
                "manifest_dir": str(manifest_dir),
                "sources": [str(p) for p in files],
                "counts": counts,
                "item_fields": ["id", "question", "context", "answers"],
            },
            indent=2,
        )
        + "\n"
    )
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m skillopt_envs.searchqa.materialize", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--source", nargs="+", required=True, help="files or folders of lucadiliello/searchqa (.parquet/.jsonl/.json)"
    )
    ap.add_argument("--out", required=True, help="the folder to write (use it as env.data_dir)")
    ap.add_argument(
        "--manifest", default=str(qa_data.PAPER_SPLIT_DIR), help="id manifests (default: SkillOpt's paper split)"
    )
    a = ap.parse_args(argv)
    try:
        counts = materialize(a.source, Path(a.out).expanduser(), Path(a.manifest).expanduser())
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"wrote {counts['train']}/{counts['val']}/{counts['test']} train/val/test items to {a.out}; "
        f"run with env.data_dir={a.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
