"""Reading a corpus file too large to hold whole: `read`'s line window and `grep`'s hits from a text file read
in chunks of CHUNK_CHARS characters, so memory stays bounded whatever the file's size or its longest line.

The answers are the reference's (lines as Python's text mode splits them, universal newlines included; a hit is
a line whose lower-cased text contains the lower-cased pattern). Whole lines inside a chunk are searched with
string methods (no Python loop per line); a line that runs past a chunk is followed piece by piece, keeping
only its first characters, its length and the last characters needed to find a match across pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

CHUNK_CHARS = 1 << 20  # characters read at a time

Hit = tuple[int, str, int]  # (line number, the line's first characters, its length without trailing whitespace)


@dataclass
class PartialLine:
    """The line being read when it runs past a chunk: what is kept of it, and whether it matched so far."""

    head: str = ""
    seen: int = 0  # characters of the line read so far
    length: int = 0  # the length so far without trailing whitespace
    tail: str = ""  # the last len(needle) - 1 lower-cased characters, to find a match across pieces
    matched: bool = False

    def feed(self, text: str, keep: int, needle: str) -> None:
        if len(self.head) < keep:
            self.head += text[: keep - len(self.head)]
        if needle and not self.matched:
            low = self.tail + text.lower()
            self.matched = needle in low
            self.tail = low[len(low) - len(needle) + 1 :] if len(needle) > 1 else ""
        body = text.rstrip()
        if body:
            self.length = self.seen + len(body)
        self.seen += len(text)


def _line_hit(n: int, line: str, keep: int) -> Hit:
    return (n, line[:keep], len(line.rstrip()))


def _whole_lines(block: str, first_no: int, needle: str, keep: int, limit: int) -> list[Hit]:
    """Hits among whole lines (`block` ends with a newline), numbered from `first_no`."""
    low = block.lower()
    if len(low) != len(block):  # lower() changed some lengths (e.g. İ): offsets no longer line up, go line by line
        lines = block.splitlines(keepends=True)
        return [_line_hit(first_no + i, ln, keep) for i, ln in enumerate(lines) if needle in ln.lower()][:limit]
    hits: list[Hit] = []
    at = low.find(needle)
    while at >= 0 and len(hits) < limit:
        start = block.rfind("\n", 0, at) + 1
        end = block.index("\n", at) + 1  # the match holds a newline only as its last character
        hits.append(_line_hit(first_no + block.count("\n", 0, start), block[start:end], keep))
        at = low.find(needle, end)
    return hits


def grep_hits(f: TextIO, needle: str, keep: int, limit: int) -> list[Hit]:
    """The first `limit` lines containing `needle` (lower-cased), each as (number, first `keep` characters, length
    without trailing whitespace)."""
    if "\n" in needle[:-1]:
        return []  # a line holds a newline only at its end: no line can contain this
    hits: list[Hit] = []
    line_no, part = 1, PartialLine()
    while len(hits) < limit:
        chunk = f.read(CHUNK_CHARS)
        if not chunk:
            break
        nl = chunk.find("\n")
        if nl < 0:
            part.feed(chunk, keep, needle)
            continue
        part.feed(chunk[: nl + 1], keep, needle)
        if part.matched:
            hits.append((line_no, part.head, part.length))
        line_no, part = line_no + 1, PartialLine()
        last = chunk.rfind("\n")
        block = chunk[nl + 1 : last + 1]
        hits += _whole_lines(block, line_no, needle, keep, limit - len(hits)) if block else []
        line_no += block.count("\n")
        part.feed(chunk[last + 1 :], keep, needle)
    if len(hits) < limit and part.seen and part.matched:  # the last line, without a newline
        hits.append((line_no, part.head, part.length))
    return hits[:limit]


def read_window(f: TextIO, first: int, count: int, cap: int) -> str:
    """Lines first .. first+count-1 (from 1) joined with their newlines, cut at `cap` characters."""
    out: list[str] = []
    size, line_no = 0, 1
    while size < cap and line_no < first + count:
        chunk = f.read(CHUNK_CHARS)
        if not chunk:
            break
        pos = 0
        if line_no < first:
            if line_no + chunk.count("\n") < first:
                line_no += chunk.count("\n")
                continue
            while line_no < first:  # the window starts in this chunk
                pos = chunk.index("\n", pos) + 1
                line_no += 1
        while pos < len(chunk) and size < cap and line_no < first + count:
            nl = chunk.find("\n", pos)
            end = len(chunk) if nl < 0 else nl + 1
            piece = chunk[pos:end][: cap - size]
            out.append(piece)
            size += len(piece)
            if nl >= 0:
                line_no += 1
            pos = end
    return "".join(out)[:cap]
