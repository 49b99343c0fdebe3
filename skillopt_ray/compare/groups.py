"""Grouping runs by their swept values: one spelling per value (4, 4.0 and "4.0" are one group), a run's record
(its values, seed, metrics and learning curve) and the groups in order."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional


def norm_value(value: Any) -> str:
    """One spelling per value, so 4, 4.0 and "4.0" group together: integral numbers without a
    decimal point, other numbers in Python's shortest float form, booleans and null in lower case."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        f = float(value)
        if math.isfinite(f) and f.is_integer() and abs(f) < 1e15:
            return str(int(f))
        return repr(f)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(norm_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps({str(k): norm_value(v) for k, v in sorted(value.items())}, sort_keys=True)
    text = str(value).strip()
    low = text.lower()
    if low in ("true", "false", "null", "none"):
        return {"none": "null"}.get(low, low)
    try:
        return norm_value(float(text)) if text and not text.lower().startswith(("nan", "inf", "-inf", "+inf")) else text
    except ValueError:
        return text


@dataclass
class Point:
    """One step of a run's learning curve, as the run recorded it."""

    step: int
    epoch: Optional[int]
    current: float  # selection score of the skill the run held after this step
    candidate: float = math.nan  # the step's candidate at the gate (nan: no candidate)
    accepted: Optional[float] = None  # 1 accepted, 0 rejected/skipped, None for step 0


@dataclass
class Record:
    """One training run: its swept values, seed, final metrics and per-step curve."""

    params: dict[str, str]
    seed: int
    metrics: dict[str, float]
    curve: list[Point] = field(default_factory=list)
    run_dir: Optional[str] = None
    test: dict[str, float] = field(default_factory=dict)  # test hard of the initial / best / final skill

    def __post_init__(self) -> None:
        self.params = {k: norm_value(v) for k, v in self.params.items()}


class RunGroups:
    """Runs grouped by the values of `group_by` (the swept keys), in numeric then text order."""

    def __init__(self, records: list[Record], group_by: list[str], counts: Optional[dict[str, int]] = None):
        self.records = records
        self.group_by = group_by
        self.counts = counts

    def _key(self, r: Record) -> tuple[str, ...]:
        return tuple(r.params.get(k, "") for k in self.group_by)

    def groups(self) -> dict[tuple[str, ...], list[Record]]:
        def order(key: tuple[str, ...]) -> list[Any]:
            return [(0, float(v), "") if _is_number(v) else (1, 0.0, v) for v in key]

        out: dict[tuple[str, ...], list[Record]] = {}
        for r in sorted(self.records, key=lambda r: (order(self._key(r)), r.seed)):
            out.setdefault(self._key(r), []).append(r)
        return out

    def label(self, key: tuple[str, ...]) -> str:
        return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(self.group_by, key)) or "all"


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
