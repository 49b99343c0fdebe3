"""The step buffer: what earlier steps of this epoch found and which edits the gate rejected
(laid out as the reference's). One entry per step that reaches the gate; reset at each epoch start; kept in
the run state, so a resumed run shows the analysts the same buffer (the reference loses it)."""

from __future__ import annotations

from typing import Any

from skillopt_envs.base import EpisodeResult

from skillopt_ray.stages.reflect import is_failure, scored


def _prefix(reason: str) -> str:
    if not reason:
        return "unknown"
    return reason.split(":", 1)[0].strip() if ":" in reason else reason


def failure_patterns(results: list[EpisodeResult], analyses: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
        {"pattern": labels[j] if j < len(labels) else prefix, "count": len(ids), "task_ids": ids}
        for j, (prefix, ids) in enumerate(groups.items())
    ]


def rejected_summary(item: Any, mode: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        return {"op": "?", "content": str(item), "target": ""}
    if mode == "patch":
        return {"op": item.get("op", ""), "content": item.get("content", ""), "target": item.get("target", "")}
    if mode == "rewrite_from_suggestions":
        return {
            "type": item.get("type", ""),
            "title": item.get("title", ""),
            "instruction": item.get("instruction", ""),
        }
    return {
        "title": item.get("title", ""),
        "change_summary": item.get("change_summary", []),
        "source_type": item.get("source_type", ""),
    }


def entry(
    *,
    step: int,
    action: str,
    results: list[EpisodeResult],
    analyses: list[dict[str, Any]],
    mode: str,
    selected: list[Any],
    score_before: float,
    score_after: float,
) -> dict[str, Any]:
    ok = scored(results)
    e: dict[str, Any] = {
        "step": step,
        "action": action,
        "n_total": len(ok) or 1,
        "n_fail": sum(is_failure(r) for r in ok),
        "failure_patterns": failure_patterns(results, analyses),
    }
    if "reject" in action and selected:
        e.update(
            score_before=score_before,
            score_after=score_after,
            rejected_edits=[rejected_summary(it, mode) for it in selected],
        )
    return e
