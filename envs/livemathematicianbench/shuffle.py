"""The reference's per-item choice shuffle: a permutation seeded by (batch seed, item id), then labels A, B, C, ...

Matching the reference's option order needs Python's own `random.Random` (MT19937 and its Fisher-Yates `shuffle`)
seeded with the first 16 hex digits of sha256("<seed>:<item id>") read as an integer.
"""

from __future__ import annotations

import hashlib
import random

from skillopt_envs.livemathematicianbench.data import Choice, normalize_label


def item_seed(seed: int, item_id: str) -> int:
    return int(hashlib.sha256(f"{seed}:{item_id}".encode()).hexdigest()[:16], 16)


def shuffle_choices(item_id: str, choices: list[Choice], correct: Choice, seed: int) -> tuple[list[Choice], Choice]:
    """(relabelled choices, new correct choice). The correct choice is the first entry whose original label matches
    the original correct label (both normalised); when none does, the old correct choice is kept as it was."""
    order = [c.copy() for c in choices]
    random.Random(item_seed(seed, item_id)).shuffle(order)
    relabelled: list[Choice] = [
        {"label": chr(ord("A") + i), "text": str(c.get("text", ""))} for i, c in enumerate(order)
    ]
    target = normalize_label(correct.get("label"))
    hit = next((new for old, new in zip(order, relabelled) if normalize_label(old.get("label")) == target), None)
    return relabelled, hit.copy() if hit is not None else correct.copy()
