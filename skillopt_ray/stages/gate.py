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


def like_for_like(candidate: dict, current: dict, metric: str, mixed_weight: float) -> tuple[float, float, int]:
    """Gate scores of candidate and current over the tasks both scored (`tasks`: id -> [hard, soft]).

    With no infra or data errors on either side this is the plain mean over the whole split; an
    episode that could not be scored on one side removes that task from both, so an infrastructure
    failure never moves a decision. Returns (candidate score, current score, tasks compared)."""
    common = sorted(set(candidate["tasks"]) & set(current["tasks"]))
    if not common:
        return 0.0, 0.0, 0

    def score(ev: dict) -> float:
        hard = sum(ev["tasks"][t][0] for t in common) / len(common)
        soft = sum(ev["tasks"][t][1] for t in common) / len(common)
        return gate_score(hard, soft, metric, mixed_weight)

    return score(candidate), score(current), len(common)
