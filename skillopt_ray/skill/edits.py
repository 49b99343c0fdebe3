"""Edit operations on a skill document with the reference's semantics (docs/reference-behaviours.md, 'Update').

Edits are the JSON objects the optimizer returns ({op, target?, content?} plus stamps such as
source_type, support_count, merge_level), applied in order, each to the previous result, with a
report row per edit. Nothing here raises: a malformed edit is reported with status `error`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from skillopt_ray.skill.document import ALL_MARKERS, first_protected_start, protected_spans

OPS = ("append", "insert_after", "replace", "delete")


class EditReport(TypedDict, total=False):
    """One row of update.json's `reports`: an edit's outcome (or a refused rewrite's, with `reason`)."""

    index: int  # 1-based position of the edit
    op: str
    target: str  # the first 200 characters
    content_preview: str  # the first 200 characters
    status: str  # applied_* | skipped_* | error
    error: str  # status error: the exception, one line
    reason: str  # a refused rewrite: why it reads as a copy of the prompt


@dataclass
class ApplyResult:
    text: str
    reports: list[EditReport] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        """Counts as the reference's step record: statuses starting with applied / skipped, and errors."""
        st = [r["status"] for r in self.reports]
        return {
            "total": len(st),
            "applied": sum(s.startswith("applied") for s in st),
            "skipped": sum(s.startswith("skipped") for s in st),
            "errors": sum(s == "error" for s in st),
        }


def _in_protected(skill: str, target: str) -> bool:
    """Only the first occurrence of the target counts (quirk: first-occurrence-protection)."""
    pos = skill.find(target)
    return pos != -1 and any(s <= pos < e for s, e in protected_spans(skill))


def _append(skill: str, content: str) -> tuple[str, bool]:
    """Append before the earliest protected block if there is one (True), else at the end (False)."""
    p = first_protected_start(skill)
    if p != -1:
        return skill[:p].rstrip() + "\n\n" + content + "\n\n" + skill[p:], True
    return skill.rstrip() + "\n\n" + content + "\n", False


def apply_edit(skill: str, edit: Any) -> tuple[str, str]:
    """One edit; returns (new text, status). Raises on a malformed edit (the caller reports `error`)."""
    op = edit.get("op", "")
    target = edit.get("target", "")
    content = edit.get("content", "").strip()
    for m in ALL_MARKERS:  # an edit can never create or duplicate a protected block
        content = content.replace(m, "")
    if target and _in_protected(skill, target):
        return skill, "skipped_protected_region"
    if op == "append":
        text, before = _append(skill, content)
        return text, "applied_append_before_protected_region" if before else "applied_append"
    if op == "insert_after":
        i = skill.find(target) if target else -1
        if i == -1:
            text, before = _append(skill, content)
            return text, "applied_insert_after_fallback_" + ("before_protected_region" if before else "append")
        n = skill.find("\n", i + len(target))
        at = len(skill) if n == -1 else n + 1
        return skill[:at] + "\n" + content + "\n" + skill[at:], "applied_insert_after"
    if op in ("replace", "delete"):
        if not target:
            return skill, f"skipped_{op}_missing_target"
        i = skill.find(target)
        if i == -1:
            return skill, f"skipped_{op}_target_not_found"
        new = content if op == "replace" else ""
        return skill[:i] + new + skill[i + len(target) :], f"applied_{op}"
    return skill, "skipped_unknown_op"


def apply_edits(skill: str, edits: list[Any]) -> ApplyResult:
    """Apply edits in order, each against the previous result."""
    result = ApplyResult(text=skill)
    for i, edit in enumerate(edits, start=1):
        row = EditReport(index=i)
        try:
            row["op"] = edit.get("op", "")
            row["target"] = str(edit.get("target", ""))[:200]
            row["content_preview"] = str(edit.get("content", ""))[:200]
            result.text, row["status"] = apply_edit(result.text, edit)
        except Exception as e:  # content: null, a bare string as an edit, ...
            row.setdefault("op", "")
            row["status"], row["error"] = "error", f"{type(e).__name__}: {e}"
        result.reports.append(row)
    return result
