"""The oracle parsed-page context: the gold source pages, rendered from the parsed bulletin JSONs.

The reference hands the target the text of the pages its question was written from, whenever the parsed
JSONs are present (this is the reference's design, not open retrieval). Each source URL's `page` number
picks the JSON elements on that page; tables become Markdown; pages and the whole are capped.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qs, urlparse

PAGE_CAP = 24_000
TOTAL_CAP = 80_000
_PAGE_RE = re.compile(r"(?:[?&]|^)page=(\d+)")
_TABLE = re.compile(r"<table", re.IGNORECASE)
_ROW = re.compile(r"<tr\b[^>]*>(.*?)</tr\s*>", re.IGNORECASE | re.DOTALL)
_CELL = re.compile(r"<t[dh]\b[^>]*>(.*?)</t[dh]\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")

# the introductory sentence: the pages are pre-parsed from the oracle source pages, primary evidence; the tail
# says what to combine them with, by mode
_INTRO = "The text below was pre-parsed from the oracle source page(s) of this question; treat it as primary evidence"
INTRO_TAILS = {
    "tools": ", and combine it with what the local document tools find.",
    "no_tools": " and answer from it.",
    "custom_search": ", and combine it with the web search results.",
}


class OracleReadError(OSError):
    """A parsed page JSON exists but cannot be read or parsed: a corpus fault, not the agent's."""


def page_of(url: str) -> Optional[int]:
    """The page a source URL points at: the first `page`, `pagenum` or `page_id` query value that reads as an
    integer (a negative one included, as the reference's int() reads it), else a `page=N` at the start or after ?
    or & anywhere in the text; `#page=7` does not count."""
    text = str(url or "").strip()
    if not text:
        return None
    try:
        query = parse_qs(urlparse(text).query)
    except ValueError:
        query = {}
    for key in ("page", "pagenum", "page_id"):
        for v in query.get(key, []):
            try:
                return int(v.strip())
            except ValueError:
                continue
    m = _PAGE_RE.search(text)
    return int(m.group(1)) if m else None


def references(source_files: list[str], source_docs: list[str]) -> list[tuple[str, int, str]]:
    """(file, page, url) triples: the i-th doc with the i-th file, or with the only file; docs without a page or
    without a file are skipped; repeats dropped."""
    if not source_files or not source_docs:
        return []
    out: list[tuple[str, int, str]] = []
    for i, url in enumerate(source_docs):
        if len(source_files) == 1:
            name = source_files[0]
        elif i < len(source_files):
            name = source_files[i]
        else:
            continue
        page = page_of(url)
        if page is None:
            continue
        ref = (name, page, url)
        if ref not in out:
            out.append(ref)
    return out


def json_path(source_file: str, roots: list[Path]) -> Optional[Path]:
    """Where the parsed JSON of a source file is: `<c>/jsons/<stem>.json` (a .json name tried first as it is), c
    being each root, its parent, and their `treasury_bulletins_parsed` subfolders, root by root."""
    base = Path(source_file).name
    names = ([base] if base.lower().endswith(".json") else []) + [Path(base).stem + ".json"]
    for root in roots:
        for c in (root, root.parent, root / "treasury_bulletins_parsed", root.parent / "treasury_bulletins_parsed"):
            for name in names:
                p = c / "jsons" / name
                if p.is_file():
                    return p
    return None


def _cell_text(raw: str) -> str:
    return " ".join(html.unescape(_TAG.sub(" ", raw)).split())


def table_markdown(content: str) -> str:
    """A Markdown table from HTML rows (tr) and cells (td/th): empty rows dropped, rows padded to the widest, the
    first row the header; `|` in cells escaped. With no row: the text with tags stripped."""
    rows = []
    for row_html in _ROW.findall(content):
        cells = [_cell_text(c).replace("|", "\\|") for c in _CELL.findall(row_html)]
        if any(cells):
            rows.append(cells)
    if not rows:
        return " ".join(html.unescape(_TAG.sub(" ", content)).split())
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "| " + " | ".join(["---"] * width) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _text(content: str) -> str:
    """Entities unescaped, CR LF and a lone CR as LF, runs of blank lines cut to one, the ends stripped."""
    text = re.sub(r"\r\n?", "\n", html.unescape(content))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _page_id(box: Any) -> Optional[int]:
    """A box's page_id as the reference reads it: int() of the value (so "3" and 3.0 are page 3)."""
    value = box.get("page_id") if isinstance(box, dict) else None
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _on_page(element: dict[str, Any], page: int) -> bool:
    boxes = element.get("bbox")
    return isinstance(boxes, list) and any(_page_id(b) == page for b in boxes)


def render_page(payload: Any, page: int) -> str:
    """The elements of `payload.document.elements` on `page` (an element spanning pages is on each), rendered and
    joined by blank lines."""
    doc = payload.get("document") if isinstance(payload, dict) else None
    elements = doc.get("elements") if isinstance(doc, dict) else None
    parts = []
    for el in elements if isinstance(elements, list) else []:
        if not isinstance(el, dict) or not _on_page(el, page):
            continue
        content = el.get("content")
        if not isinstance(content, str) or not content.strip():
            continue
        content = content.strip()
        part = table_markdown(content) if _TABLE.search(content) else _text(content)
        if part:
            parts.append(part)
    return "\n\n".join(parts).strip()


def _capped(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[:cap].rstrip() + f"\n\n[... {len(text) - cap} characters omitted from this parsed page ...]"


@dataclass
class OracleContext:
    text: str
    pages: int


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise OracleReadError(f"parsed page file {path} cannot be read: {e}") from None


def build_context(
    source_files: list[str], source_docs: list[str], roots: list[Path], mode: str = "tools"
) -> OracleContext:
    """The oracle block (intro sentence, blank line, page blocks) or empty text when no parsed page is available."""
    blocks: list[str] = []
    used = 0
    seen: set[tuple[Path, int]] = set()
    cache: dict[Path, Any] = {}
    for name, page, url in references(source_files, source_docs):
        path = json_path(name, roots)
        if path is None or (path, page) in seen:
            continue
        seen.add((path, page))
        if path not in cache:
            cache[path] = load_json(path)
        text = render_page(cache[path], page)
        if not text.strip():
            continue
        block = f"### {name} page {page}\nSource URL: {url}\n\n{_capped(text, PAGE_CAP)}"
        room = TOTAL_CAP - used
        if len(block) > room:
            if room > 0:  # a context already full ends without a note, as the reference's does
                blocks.append(block[:room].rstrip() + "\n\n[... oracle parsed page context truncated ...]")
            break
        blocks.append(block)
        used += len(block)
    if not blocks:
        return OracleContext("", 0)
    intro = _INTRO + INTRO_TAILS.get(mode, INTRO_TAILS["tools"])
    return OracleContext(intro + "\n\n" + "\n\n".join(blocks), len(blocks))
