"""A session file read line by line with bounded memory: each JSON record, what was skipped and why."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skillopt_envs.jsontypes import JSONObject

# a line longer than this (a pasted binary, a huge tool output) is skipped without being held in memory
MAX_LINE_BYTES = 4 * 1024 * 1024
_CHUNK = 1024 * 1024
HEAD = 256  # where a record's kind is written


def records(path: Path, skipped: Counter, skip: tuple[bytes, ...] = ()) -> Iterator[JSONObject]:
    """The file's JSON objects in order. A line that is not JSON counts as `bad_json`, except an unfinished last line
    (a session still being written) which counts as `truncated`; an oversized line as `oversized`. Bytes that are not
    UTF-8 are replaced, never fatal; a record nested too deep to parse counts as `too_deep`. A line whose head holds one of the `skip` markers (a record kind the reader
    never uses, such as a tool's whole output) is passed over without being parsed."""
    with path.open("rb") as f:
        while True:
            line = f.readline(MAX_LINE_BYTES)
            if not line:
                return
            if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
                skipped["oversized"] += 1
                _skip_rest(f)
                continue
            if not line.strip() or (skip and any(m in line[:HEAD] for m in skip)):
                continue
            try:
                val = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                skipped["truncated" if not line.endswith(b"\n") else "bad_json"] += 1
                continue
            except RecursionError:  # arrays nested past the parser's depth
                skipped["too_deep"] += 1
                continue
            if isinstance(val, dict):
                yield val
            else:
                skipped["not_an_object"] += 1


def _skip_rest(f: Any) -> None:
    """Read past the rest of an oversized line in bounded chunks."""
    while True:
        chunk = f.readline(_CHUNK)
        if not chunk or chunk.endswith(b"\n"):
            return


def first_record(path: Path) -> JSONObject:
    """The file's first JSON object ({} when there is none): enough to know a session's id, folder and start."""
    for rec in records(path, Counter()):
        return rec
    return {}


ODD = (TypeError, AttributeError, ValueError, KeyError, RecursionError)  # a record of a shape the reader did not expect
