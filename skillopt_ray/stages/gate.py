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


def reason(action: str, candidate: float, current: float, best: float, metric: str, n_tasks: int) -> str:
    """One sentence a user can read: the scores compared, the rule, the outcome."""
    compared = f"candidate {candidate:.4f} vs current {current:.4f} (best {best:.4f}), {metric} score over {n_tasks} selection tasks"
    if action == FORCE_ACCEPT:
        return f"{compared}: accepted without a gate (forced)"
    if action in (ACCEPT, ACCEPT_NEW_BEST):
        extra = " and the best so far" if action == ACCEPT_NEW_BEST else ", not above the best"
        return f"{compared}: accepted, strictly above the current score{extra}"
    if candidate == current:
        return f"{compared}: rejected, a tie (only a strict improvement is accepted)"
    return f"{compared}: rejected, below the current score"


def flipped(candidate: dict, current: dict) -> dict[str, list[str]]:
    """Selection tasks whose hard result changed between the current skill's evaluation and the candidate's."""
    common = set(candidate["tasks"]) & set(current["tasks"])
    won = lambda ev, t: bool(ev["tasks"][t][0])  # noqa: E731
    return {
        "to_pass": sorted(t for t in common if won(candidate, t) and not won(current, t)),
        "to_fail": sorted(t for t in common if won(current, t) and not won(candidate, t)),
    }
