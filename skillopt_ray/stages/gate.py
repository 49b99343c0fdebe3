"""Stage 6 — gate: score the candidate on the selection split; accept only on strict improvement."""

from __future__ import annotations

from dataclasses import asdict, dataclass

ACCEPT_NEW_BEST = "accept_new_best"
ACCEPT = "accept"
REJECT = "reject"
FORCE_ACCEPT = "force_accept"
SKIP = "skip"  # nothing changed: no validation needed


ACCEPTING = (ACCEPT, ACCEPT_NEW_BEST, FORCE_ACCEPT)


def is_accepted(action: str) -> bool:
    return action in ACCEPTING


def gate_score(hard: float, soft: float, metric: str, mixed_weight: float) -> float:
    if metric == "hard":
        return hard
    if metric == "soft":
        return soft
    if metric == "mixed":
        return (1 - mixed_weight) * hard + mixed_weight * soft
    raise ValueError(f"unknown gate metric {metric!r}")


@dataclass
class GateDecision:
    action: str
    candidate_score: float
    current_score: float
    best_score: float

    @property
    def accepted(self) -> bool:
        return is_accepted(self.action)

    def to_dict(self) -> dict:
        return asdict(self)


def decide(candidate_score: float, current_score: float, best_score: float, use_gate: bool) -> GateDecision:
    """Strict improvement over the current score accepts; ties reject; use_gate=False force-accepts."""
    if not use_gate:
        return GateDecision(FORCE_ACCEPT, candidate_score, current_score, best_score)
    if candidate_score > current_score:
        action = ACCEPT_NEW_BEST if candidate_score > best_score else ACCEPT
        return GateDecision(action, candidate_score, current_score, best_score)
    return GateDecision(REJECT, candidate_score, current_score, best_score)
