"""Edit operations on a skill document, applied in order with a per-edit report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from skillopt_ray.skill.document import ALL_MARKERS, overlaps_protected, protected_spans

OPS = ("append", "insert_after", "replace", "delete")

APPLIED = "applied"
SKIPPED_TARGET_MISSING = "skipped_target_missing"
SKIPPED_PROTECTED_REGION = "skipped_protected_region"
SKIPPED_INVALID = "skipped_invalid"
SKIPPED_NOOP = "skipped_noop"


@dataclass(frozen=True)
class Edit:
    op: str
    content: str = ""
    target: str = ""
    rationale: str = ""
    source: str = ""  # "failure" | "success" | "" — used when merging

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Edit":
        return Edit(
            op=str(d.get("op", "")),
            content=str(d.get("content", "") or ""),
            target=str(d.get("target", "") or ""),
            rationale=str(d.get("rationale", "") or ""),
            source=str(d.get("source", "") or ""),
        )

    def validation_error(self) -> str | None:
        if self.op not in OPS:
            return f"unknown op {self.op!r} (allowed: {', '.join(OPS)})"
        if self.op in ("insert_after", "replace", "delete") and not self.target:
            return f"op {self.op} needs a non-empty target"
        if self.op in ("append", "insert_after", "replace") and not self.content.strip():
            return f"op {self.op} needs non-empty content"
        return None


@dataclass
class EditReport:
    index: int
    op: str
    status: str
    detail: str = ""


@dataclass
class ApplyResult:
    text: str
    reports: list[EditReport] = field(default_factory=list)

    @property
    def n_applied(self) -> int:
        return sum(r.status == APPLIED for r in self.reports)


def _find_editable(text: str, target: str) -> tuple[int, bool]:
    """Position of the first occurrence of target outside protected regions.

    Returns (position or -1, whether the target exists only inside a protected region).
    """
    pos = text.find(target)
    seen_protected = False
    while pos != -1:
        if not overlaps_protected(text, pos, pos + len(target)):
            return pos, False
        seen_protected = True
        pos = text.find(target, pos + 1)
    return -1, seen_protected


def apply_edit(text: str, edit: Edit) -> tuple[str, str, str]:
    """Apply one edit; returns (new_text, status, detail)."""
    err = edit.validation_error()
    if err:
        return text, SKIPPED_INVALID, err
    if any(m in edit.content for m in ALL_MARKERS) or any(m in edit.target for m in ALL_MARKERS):
        return text, SKIPPED_PROTECTED_REGION, "edit mentions a protected-region marker"
    if edit.op == "append":
        spans = protected_spans(text)
        if spans:
            idx = spans[0].start
            head = text[:idx].rstrip("\n")
            return head + "\n\n" + edit.content.strip() + "\n\n" + text[idx:], APPLIED, ""
        return text.rstrip("\n") + "\n\n" + edit.content.strip() + "\n", APPLIED, ""
    pos, only_protected = _find_editable(text, edit.target)
    if pos == -1:
        if only_protected:
            return text, SKIPPED_PROTECTED_REGION, "target lies inside a protected region"
        return text, SKIPPED_TARGET_MISSING, "target text not found"
    end = pos + len(edit.target)
    if edit.op == "insert_after":
        new = text[:end] + "\n" + edit.content.strip("\n") + text[end:]
    elif edit.op == "replace":
        new = text[:pos] + edit.content + text[end:]
    else:  # delete
        new = text[:pos] + text[end:]
    if new == text:
        return text, SKIPPED_NOOP, "edit changes nothing"
    return new, APPLIED, ""


def apply_edits(text: str, edits: list[Edit]) -> ApplyResult:
    """Apply edits in order, each against the previous result."""
    result = ApplyResult(text=text)
    for i, edit in enumerate(edits):
        new, status, detail = apply_edit(result.text, edit)
        result.text = new
        result.reports.append(EditReport(index=i, op=edit.op, status=status, detail=detail))
    return result
