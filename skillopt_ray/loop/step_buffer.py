"""The step buffer: what earlier steps of this epoch found and which edits the gate rejected
(laid out as the reference's). One entry per step that reaches the gate; reset at each epoch start; kept in
the run state, so a resumed run shows the analysts the same buffer (the reference loses it)."""

from __future__ import annotations

from typing import Any

from skillopt_envs.base import EpisodeResult

from skillopt_ray.runs.payload import Item
from skillopt_ray.runs.state import BufferEntry, FailurePattern, RejectedItem
from skillopt_ray.stages.reflect import Analysis, is_failure, scored


def _prefix(reason: str) -> str:
    if not reason:
        return "unknown"
    return reason.split(":", 1)[0].strip() if ":" in reason else reason


def failure_patterns(results: list[EpisodeResult], analyses: list[Analysis]) -> list[FailurePattern]:
    """Failed episodes grouped by fail-reason prefix (first-seen order), labelled positionally with the
    failure analysts' `failure_summary` entries in minibatch order (quirk: buffer-labels-by-position: a zip,
    not a match)."""
    groups: dict[str, list[str]] = {}
    for r in scored(results):
        if is_failure(r):
            groups.setdefault(_prefix(r.fail_reason), []).append(r.task_id)
    labels = []
    for a in sorted((a for a in analyses if a.get("source_type") == "failure"), key=lambda a: a.get("minibatch", 0)):
        for fs in a.get("failure_summary") or []:
            if isinstance(fs, dict):
                ftype, desc = fs.get("failure_type", ""), fs.get("description", "")
                labels.append(f"{ftype}: {desc}" if desc else str(ftype))
    return [
        FailurePattern(pattern=labels[j] if j < len(labels) else prefix, count=len(ids), task_ids=ids)
        for j, (prefix, ids) in enumerate(groups.items())
    ]


def rejected_summary(item: Any, mode: str) -> RejectedItem:
    """`item` is an update item as the model wrote it: a bare string or number is kept as its text."""
    if not isinstance(item, dict):
        return RejectedItem(op="?", content=str(item), target="")
    if mode == "patch":
        return RejectedItem(op=item.get("op", ""), content=item.get("content", ""), target=item.get("target", ""))
    if mode == "rewrite_from_suggestions":
        return RejectedItem(
            type=item.get("type", ""), title=item.get("title", ""), instruction=item.get("instruction", "")
        )
    return RejectedItem(
        title=item.get("title", ""),
        change_summary=item.get("change_summary", []),
        source_type=item.get("source_type", ""),
    )


def entry(
    *,
    step: int,
    action: str,
    results: list[EpisodeResult],
    analyses: list[Analysis],
    mode: str,
    selected: list[Item],
    score_before: float,
    score_after: float,
) -> BufferEntry:
    ok = scored(results)
    e = BufferEntry(
        step=step,
        action=action,
        n_total=len(ok) or 1,
        n_fail=sum(is_failure(r) for r in ok),
        failure_patterns=failure_patterns(results, analyses),
    )
    if "reject" in action and selected:
        e["score_before"], e["score_after"] = score_before, score_after
        e["rejected_edits"] = [rejected_summary(it, mode) for it in selected]
    return e
