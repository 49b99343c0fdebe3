"""The skill document: Markdown text with protected regions that step edits never touch.

Two protected regions exist, each delimited by HTML-comment markers:
the slow-update block (written at epoch boundaries) and the appendix
(execution-lapse notes from skill-aware reflection).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

SLOW_UPDATE = "SLOW_UPDATE"
APPENDIX = "APPENDIX"
REGIONS = (SLOW_UPDATE, APPENDIX)


def begin_marker(region: str) -> str:
    return f"<!-- SKILLOPT:{region}:BEGIN -->"


def end_marker(region: str) -> str:
    return f"<!-- SKILLOPT:{region}:END -->"


ALL_MARKERS = tuple(m for r in REGIONS for m in (begin_marker(r), end_marker(r)))


def skill_hash(text: str) -> str:
    """Content hash used for score caching and artifact naming."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Span:
    start: int
    end: int  # exclusive, includes the end marker


def protected_spans(text: str) -> list[Span]:
    """Character spans of every protected region, markers included."""
    spans = []
    for region in REGIONS:
        b, e = begin_marker(region), end_marker(region)
        start = text.find(b)
        while start != -1:
            stop = text.find(e, start)
            stop = len(text) if stop == -1 else stop + len(e)
            spans.append(Span(start, stop))
            start = text.find(b, stop)
    return sorted(spans, key=lambda s: s.start)


def overlaps_protected(text: str, start: int, end: int) -> bool:
    return any(start < s.end and end > s.start for s in protected_spans(text))


def body_of(text: str) -> str:
    """The editable part of the document (protected regions removed)."""
    out, pos = [], 0
    for span in protected_spans(text):
        out.append(text[pos : span.start])
        pos = span.end
    out.append(text[pos:])
    return "".join(out)


def region_content(text: str, region: str) -> str:
    b, e = begin_marker(region), end_marker(region)
    start = text.find(b)
    if start == -1:
        return ""
    stop = text.find(e, start)
    stop = len(text) if stop == -1 else stop
    return text[start + len(b) : stop].strip("\n")


def set_region(text: str, region: str, content: str) -> str:
    """Replace (or create, at the end of the document) a protected region's content."""
    block = f"{begin_marker(region)}\n{content.strip()}\n{end_marker(region)}"
    b, e = begin_marker(region), end_marker(region)
    start = text.find(b)
    if start == -1:
        # slow-update block goes before the appendix; the appendix goes last
        if region == SLOW_UPDATE and begin_marker(APPENDIX) in text:
            idx = text.find(begin_marker(APPENDIX))
            return text[:idx].rstrip("\n") + "\n\n" + block + "\n\n" + text[idx:]
        return text.rstrip("\n") + "\n\n" + block + "\n"
    stop = text.find(e, start)
    stop = len(text) if stop == -1 else stop + len(e)
    return text[:start] + block + text[stop:]


def replace_body(text: str, new_body: str) -> str:
    """Swap the editable body for a rewritten one, keeping protected regions verbatim.

    Used by rewrite modes: whatever protected content the rewrite contains is
    discarded, and the original regions are re-attached.
    """
    clean = body_of(new_body).rstrip("\n")
    out = clean + "\n"
    for region in REGIONS:
        content = region_content(text, region)
        if begin_marker(region) in text:
            out = set_region(out, region, content)
    return out
