"""The local document tools (glob, read, grep) with the reference's semantics and limits.

They run in the env actor that plays the episode, on that node's copy of the corpus. Access: a path is
readable only when its real path lies under a document root and its basename is one of the item's allowed
files (every file when the item names none). A tool's failure is the observation the model sees; only a
corpus file that exists and cannot be read raises (CorpusReadError: an infrastructure fault, not a score).

Memory and output stay bounded whatever the corpus holds: a file up to WHOLE_FILE_BYTES is read whole (and
kept in the actor's cache, itself capped in bytes); a larger one is read in chunks (stream.py), so a 2 GB
file or a 10 MB line costs a few MB. A grep hit's line is cut at GREP_LINE_CHARS and the whole grep
output at GREP_CHARS, each cut said in the output; `read` keeps the reference's silent 4,000-character cut.
"""

from __future__ import annotations

import bisect
import fnmatch
import io
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.chat import ToolSpec
from skillopt_envs.officeqa import stream

MAX_GLOB = 50
READ_LINES = 80
READ_CHARS = 4000
MAX_GREP = 20
GREP_LINE_CHARS = 2000  # a grep hit's line past this is cut, with a note (the reference returns it whole)
GREP_CHARS = 20_000  # the grep output past this is cut, with a note
WHOLE_FILE_BYTES = 8 << 20  # larger files are streamed, never held whole
CACHE_BYTES = 32 << 20  # an actor's cache of whole files holds at most this many file bytes

TOOL_SCHEMAS: list[ToolSpec] = [
    {
        "type": "function",
        "function": {
            "name": "glob",
            "description": "Find corpus documents whose file name or path relative to the corpus matches a glob pattern.",
            "parameters": {
                "type": "object",
                "properties": {"pattern": {"type": "string", "description": "glob pattern, e.g. *1944_01*"}},
                "required": ["pattern"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read a window of lines from a corpus document (80 lines and 4000 characters at most).",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "absolute path of the document"},
                    "start": {"type": "integer", "description": "first line to read, from 1"},
                    "limit": {"type": "integer", "description": "number of lines to read"},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "Case-insensitive literal search in one document; returns up to 20 numbered matching lines.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "text to look for (not a regular expression)"},
                    "path": {"type": "string", "description": "absolute path of the document"},
                },
                "required": ["pattern", "path"],
            },
        },
    },
]


class NotAFile(Exception):
    """The model named a path that is no regular file (missing, a directory, an impossible name): its mistake."""


class CorpusReadError(Exception):
    """A corpus file the item may read exists but cannot be read (permissions, I/O, not UTF-8)."""

    kind = "corpus_read"  # skillopt_envs.base.INFRA_KINDS


class Doc:
    """A corpus file read once: its lines (with their newlines) and, for grep, its lower-cased text with the offset
    where each line starts (so a search costs the matches it finds, not a pass over every line)."""

    def __init__(self, text: str):
        self.lines = io.StringIO(text).readlines()
        lower = text.lower()
        # lower() can change a string's length (a few non-ASCII letters): then offsets no longer match lines
        self.lower: Optional[str] = lower if len(lower) == len(text) else None
        self.starts: list[int] = []
        at = 0
        for ln in self.lines:
            self.starts.append(at)
            at += len(ln)

    def grep(self, needle: str, limit: int) -> list[int]:
        """0-based indices of the first `limit` lines whose lower-cased text contains `needle` (already lower-cased)."""
        if self.lower is None or "\n" in needle:
            return [i for i, ln in enumerate(self.lines) if needle in ln.lower()][:limit]
        hits: list[int] = []
        at = self.lower.find(needle)
        while at >= 0 and len(hits) < limit:
            i = bisect.bisect_right(self.starts, at) - 1
            hits.append(i)
            nxt = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.lower)
            at = self.lower.find(needle, nxt)
        return hits


class LineCache:
    """The lines of recently read corpus files, shared by the episodes of one env actor: a 24-turn episode reads and
    greps the same bulletin again and again. Keyed by real path, size and modification time, so an edited file is
    read afresh; at most `max_files` files are kept."""

    def __init__(self, max_files: int = 32, max_bytes: int = CACHE_BYTES):
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._lines: OrderedDict[tuple[str, int, int], Doc] = OrderedDict()
        self._lock = threading.Lock()

    def doc(self, real: str, st: os.stat_result, read: Any) -> Doc:
        key = (real, st.st_size, st.st_mtime_ns)
        with self._lock:
            hit = self._lines.get(key)
            if hit is not None:
                self._lines.move_to_end(key)
                return hit
        doc = Doc(read(real))
        with self._lock:
            self._lines[key] = doc
            while len(self._lines) > self.max_files or (
                len(self._lines) > 1 and sum(k[1] for k in self._lines) > self.max_bytes
            ):
                self._lines.popitem(last=False)
        return doc


@dataclass(frozen=True)
class ToolCall:
    command: str
    output: str


def grep_output(hits: list[tuple[int, str, int]]) -> str:
    """Hits as `<n>: <line>` (the reference's form), each line cut at GREP_LINE_CHARS and the whole at GREP_CHARS,
    saying so where a cut applies. A hit: (line number, the line without trailing whitespace or its first
    characters, the whole line's length without trailing whitespace)."""
    rows: list[str] = []
    used = 0
    for n, text, length in hits:
        row = f"{n}: {text[:GREP_LINE_CHARS].rstrip()}"
        if length > GREP_LINE_CHARS:
            row += f" [... line cut: {GREP_LINE_CHARS} of its {length} characters shown]"
        if used + len(row) > GREP_CHARS:
            rows.append(
                f"[... grep output cut at {GREP_CHARS} characters: {len(rows)} of {len(hits)} matching lines shown; "
                "use a more specific pattern]"
            )
            break
        rows.append(row)
        used += len(row) + 1
    return "\n".join(rows) if rows else "[no matches]"


class ToolRuntime:
    """The tools of one episode: the corpus roots and the item's allowed basenames (empty = every file)."""

    def __init__(self, roots: list[Path], allowed_files: set[str], cache: Optional[LineCache] = None):
        self.roots = [Path(os.path.realpath(r)) for r in roots]
        self.allowed = set(allowed_files)
        self.cache = cache

    # ---------- access ----------

    def is_allowed(self, path: str) -> bool:
        """Under a root (a relative path starts at the working directory, as in the reference) and an allowed name."""
        real = os.path.realpath(os.path.abspath(path))
        inside = any(real == str(r) or real.startswith(str(r) + os.sep) for r in self.roots)
        return inside and (not self.allowed or os.path.basename(real) in self.allowed)

    @staticmethod
    def _read(real: str) -> str:
        try:
            with open(real, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise CorpusReadError(f"corpus file {real} cannot be read: {why}") from None

    @staticmethod
    def _file(path: str) -> tuple[str, os.stat_result]:
        """The real path of a regular file and its stat; NotAFile for anything else (the model's mistake)."""
        real = os.path.realpath(os.path.abspath(path))
        if not os.path.isfile(real):  # isfile never raises: a name too long or a missing file is simply not a file
            raise NotAFile("not a file" if os.path.isdir(real) else "no such file")
        try:
            return real, os.stat(real)
        except OSError as e:
            raise CorpusReadError(f"corpus file {real} cannot be read: {e.strerror or e}") from None

    def _doc(self, real: str, st: os.stat_result) -> Optional[Doc]:
        """The file read whole as UTF-8 (as the reference does), from the actor's cache when there is one; None
        for a file too large to hold (it is streamed instead)."""
        if st.st_size > WHOLE_FILE_BYTES:
            return None
        if self.cache is None:
            return Doc(self._read(real))
        return self.cache.doc(real, st, self._read)

    @staticmethod
    def _stream(real: str, use: Any) -> Any:
        """`use(f)` on the open text file (UTF-8, universal newlines, as the reference reads it)."""
        try:
            with open(real, encoding="utf-8") as f:
                return use(f)
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise CorpusReadError(f"corpus file {real} cannot be read: {why}") from None

    # ---------- the tools ----------

    def glob(self, pattern: Any = None) -> ToolCall:
        pattern = str(pattern) if pattern else "*"
        hits: list[str] = []
        for root in self.roots:
            for dirpath, dirnames, names in os.walk(root):
                dirnames.sort()
                for name in sorted(names):
                    if self.allowed and name not in self.allowed:
                        continue
                    full = os.path.join(dirpath, name)
                    rel = os.path.relpath(full, root)
                    if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(name, pattern):
                        hits.append(full)
                        if len(hits) >= MAX_GLOB:
                            break
                if len(hits) >= MAX_GLOB:
                    break
            if len(hits) >= MAX_GLOB:
                break
        return ToolCall(f"glob(pattern={pattern!r})", "\n".join(hits) if hits else "[no matches]")

    def read(self, path: Any = None, start: Any = None, limit: Any = None) -> ToolCall:
        if not path:
            return ToolCall("read(path='')", "[read error: missing path]")
        path = str(path)
        if not self.is_allowed(path):  # the reference shows only the path here, before reading the window
            return ToolCall(f"read(path={path!r})", "[read error: path not allowed]")
        try:
            first = max(int(start or 1), 1)
            count = max(int(limit or READ_LINES), 1)
        except (TypeError, ValueError):
            # the reference ends the episode with an error here; the model sees the mistake instead
            return ToolCall(
                f"read(path={path!r}, start={start!r}, limit={limit!r})",
                "[read error: start and limit must be integers]",
            )
        cmd = f"read(path={path!r}, start={first}, limit={count})"
        try:
            real, st = self._file(path)
        except NotAFile as e:
            return ToolCall(cmd, f"[read error: {e}]")
        doc = self._doc(real, st)
        if doc is None:
            out = self._stream(real, lambda f: stream.read_window(f, first, count, READ_CHARS))
        else:
            out = "".join(doc.lines[first - 1 : first - 1 + count])[:READ_CHARS]
        return ToolCall(cmd, out if out else "[empty file]")

    def grep(self, pattern: Any = None, path: Any = None) -> ToolCall:
        needle = str(pattern or "").lower()
        path = str(path or "")
        cmd = f"grep(pattern={needle!r}, path={path!r})"
        if not needle or not path:
            return ToolCall(cmd, "[grep error: missing pattern or path]")
        if not self.is_allowed(path):
            return ToolCall(cmd, "[grep error: path not allowed]")
        try:
            real, st = self._file(path)
        except NotAFile as e:
            return ToolCall(cmd, f"[grep error: {e}]")
        doc = self._doc(real, st)
        if doc is None:
            hits = self._stream(real, lambda f: stream.grep_hits(f, needle, GREP_LINE_CHARS, MAX_GREP))
        else:
            found = [(i + 1, doc.lines[i].rstrip()) for i in doc.grep(needle, MAX_GREP)]
            hits = [(n, ln, len(ln)) for n, ln in found]
        return ToolCall(cmd, grep_output(hits))

    def run(self, name: str, arguments: Any) -> ToolCall:
        """One tool call by name with its JSON arguments (a string, as the API sends them, or a dict)."""
        if isinstance(arguments, str):
            if not arguments.strip():
                args: Any = {}
            else:
                try:
                    args = json.loads(arguments)
                except ValueError as e:
                    # the reference ends the episode with an error here; the model sees the mistake instead
                    return ToolCall(f"{name}({arguments[:200]})", f"[tool error: arguments are not valid JSON: {e}]")
        else:
            args = arguments or {}
        if not isinstance(args, dict):
            return ToolCall(f"{name}({str(arguments)[:200]})", "[tool error: arguments must be a JSON object]")
        if name == "glob":
            return self.glob(args.get("pattern"))
        if name == "read":
            return self.read(args.get("path"), args.get("start"), args.get("limit"))
        if name == "grep":
            return self.grep(args.get("pattern"), args.get("path"))
        return ToolCall(name, f"[tool error: unknown tool {name}]")
