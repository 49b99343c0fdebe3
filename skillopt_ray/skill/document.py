"""The skill document: Markdown text with protected regions that step edits never touch.

Two protected regions exist, delimited by the same HTML-comment markers SkillOpt's reference
implementation writes, so a skill saved by either tool loads with its blocks protected in the other: the
slow-update block (written at epoch boundaries) and the appendix (execution-lapse notes from skill-aware
reflection). See docs/reference-behaviours.md, "Protected blocks".
"""

from __future__ import annotations

import hashlib
import re

SLOW_START, SLOW_END = "<!-- SLOW_UPDATE_START -->", "<!-- SLOW_UPDATE_END -->"
APPENDIX_START, APPENDIX_END = "<!-- APPENDIX_START -->", "<!-- APPENDIX_END -->"
MARKER_PAIRS = ((SLOW_START, SLOW_END), (APPENDIX_START, APPENDIX_END))
ALL_MARKERS = (SLOW_START, SLOW_END, APPENDIX_START, APPENDIX_END)
APPENDIX_HEADING = "## Execution Notes Appendix"

# Markers written by skillopt-ray before it adopted the reference's: translated on load.
_LEGACY = {
    "<!-- SKILLOPT:SLOW_UPDATE:BEGIN -->": SLOW_START,
    "<!-- SKILLOPT:SLOW_UPDATE:END -->": SLOW_END,
    "<!-- SKILLOPT:APPENDIX:BEGIN -->": APPENDIX_START,
    "<!-- SKILLOPT:APPENDIX:END -->": APPENDIX_END,
}


def skill_hash(text: str) -> str:
    """First 16 hex characters of the SHA-256 of the text (score cache key, artifact names)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def normalize_markers(text: str) -> str:
    """A skill file from an older skillopt-ray uses other marker strings; give it the reference's."""
    for old, new in _LEGACY.items():
        text = text.replace(old, new)
    return text


def protected_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each protected region: the first start marker through the end of the first
    end marker of its pair. A pair with a missing marker protects nothing (as in the reference)."""
    spans = []
    for start_m, end_m in MARKER_PAIRS:
        s, e = text.find(start_m), text.find(end_m)
        if s != -1 and e != -1:
            spans.append((s, e + len(end_m)))
    return spans


def first_protected_start(text: str) -> int:
    """Index of the earliest start marker of either kind, or -1."""
    found = [i for i in (text.find(SLOW_START), text.find(APPENDIX_START)) if i != -1]
    return min(found) if found else -1


def _remove_regions(text: str, start_m: str, end_m: str) -> str:
    """Remove every start..end region (each start paired with the next end); orphan markers go too."""
    out, pos = [], 0
    while True:
        s = text.find(start_m, pos)
        if s == -1:
            out.append(text[pos:])
            break
        out.append(text[pos:s])
        e = text.find(end_m, s + len(start_m))
        if e == -1:  # orphan start marker: drop the marker only
            pos = s + len(start_m)
            continue
        pos = e + len(end_m)
    return "".join(out).replace(end_m, "")


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", text).rstrip()


def without_protected(text: str) -> str:
    """The body with both protected regions removed (rewrite modes, semantic density)."""
    for start_m, end_m in MARKER_PAIRS:
        text = _remove_regions(text, start_m, end_m)
    return text


# ---------- slow-update block ----------


def inject_empty_slow_update_field(skill: str) -> str:
    if SLOW_START in skill and SLOW_END in skill:
        return skill
    return skill.rstrip() + f"\n\n{SLOW_START}\n{SLOW_END}\n"


def extract_slow_update_field(skill: str) -> str:
    s, e = skill.find(SLOW_START), skill.find(SLOW_END)
    if s == -1 or e == -1:
        return ""
    return skill[s + len(SLOW_START) : e].strip()


def replace_slow_update_field(skill: str, guidance: str) -> str:
    """Exactly one block, always at the very end of the document, holding the guidance verbatim."""
    body = _tidy(_remove_regions(skill, SLOW_START, SLOW_END))
    return body + f"\n\n{SLOW_START}\n{guidance.strip()}\n{SLOW_END}\n"


# ---------- appendix ----------


def inject_empty_appendix_field(skill: str) -> str:
    if APPENDIX_START in skill and APPENDIX_END in skill:
        return skill
    return skill.rstrip() + f"\n\n{APPENDIX_START}\n{APPENDIX_HEADING}\n{APPENDIX_END}\n"


def appendix_notes(skill: str) -> list[str]:
    """The bullet notes of the appendix (heading skipped)."""
    s, e = skill.find(APPENDIX_START), skill.find(APPENDIX_END)
    if s == -1 or e == -1:
        return []
    lines = skill[s + len(APPENDIX_START) : e].splitlines()
    return [ln.strip()[2:].strip() for ln in lines if ln.strip().startswith("- ")]


def _note_key(note: str) -> str:
    return " ".join(note.split()).rstrip(" .;:,_-").casefold()


def dedupe_notes(notes: list[str]) -> list[str]:
    """Whitespace collapsed, blanks dropped, a note whose canonical key was seen before dropped (first kept)."""
    seen: set[str] = set()
    out = []
    for n in notes:
        n = " ".join(str(n).split())
        k = _note_key(n)
        if n and k not in seen:
            seen.add(k)
            out.append(n)
    return out


def set_appendix_notes(skill: str, notes: list[str]) -> str:
    """Rebuild the appendix at the very end of the document from `notes`."""
    body = _tidy(_remove_regions(skill, APPENDIX_START, APPENDIX_END))
    bullets = "".join(f"- {n}\n" for n in notes)
    return body + f"\n\n{APPENDIX_START}\n{APPENDIX_HEADING}\n{bullets}{APPENDIX_END}\n"


def append_to_appendix_field(skill: str, new_notes: list[str]) -> str:
    return set_appendix_notes(skill, dedupe_notes(appendix_notes(skill) + dedupe_notes(new_notes)))


def keep_protected_regions(original: str, rewritten: str) -> str:
    """Rewrite modes: the rewritten body with the original's protected regions re-attached verbatim
    (the reference relies on the prompt alone: quirk: rewrite-protection-by-prompt). With no marker on either
    side there is nothing to protect, and the model's text is kept as it is, blank lines included, as the
    reference keeps it."""
    if not any(m in original or m in rewritten for m in ALL_MARKERS):
        return rewritten
    out = _tidy(without_protected(rewritten)) + "\n"
    for start_m, end_m in MARKER_PAIRS:
        s, e = original.find(start_m), original.find(end_m)
        if s != -1 and e != -1:
            out = out.rstrip() + "\n\n" + original[s : e + len(end_m)] + "\n"
    return out
