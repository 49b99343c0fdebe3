import math

import pytest

from envs.base import EpisodeResult
from skillopt_ray.epoch.slow_update import classify_pair, pair_categories
from skillopt_ray.stages.gate import ACCEPT, ACCEPT_NEW_BEST, FORCE_ACCEPT, REJECT, decide, gate_score
from skillopt_ray.stages.select import edit_budget


@pytest.mark.parametrize("schedule,expected", [
    ("cosine", [4, 4, 3, 2, 2]),
    ("linear", [4, 4, 3, 3, 2]),
    ("constant", [4, 4, 4, 4, 4]),
])
def test_schedules_exact_budget_sequences(schedule, expected):
    assert [edit_budget(schedule, t, 5, 4, 2) for t in range(5)] == expected


def test_cosine_default_over_eight_steps_and_single_step():
    assert [edit_budget("cosine", t, 8, 4, 2) for t in range(8)] == [4, 4, 4, 3, 3, 2, 2, 2]
    assert edit_budget("cosine", 0, 1, 4, 2) == 4


def test_gate_actions_and_ties():
    assert decide(0.6, 0.5, 0.5, True).action == ACCEPT_NEW_BEST
    assert decide(0.6, 0.5, 0.7, True).action == ACCEPT
    assert decide(0.5, 0.5, 0.5, True).action == REJECT  # ties reject
    assert decide(0.4, 0.5, 0.5, True).action == REJECT
    d = decide(0.1, 0.5, 0.5, False)
    assert d.action == FORCE_ACCEPT and d.accepted and d.candidate_score == 0.1


def test_gate_metrics():
    assert gate_score(1.0, 0.5, "hard", 0.3) == 1.0
    assert gate_score(1.0, 0.5, "soft", 0.3) == 0.5
    assert math.isclose(gate_score(1.0, 0.5, "mixed", 0.3), 0.85)
    with pytest.raises(ValueError):
        gate_score(1, 1, "median", 0.5)


def _r(tid, hard, infra=False):
    return EpisodeResult(tid, "t", hard=hard, soft=hard, infra_error=infra)


def test_pair_categories_and_policies():
    prev = [_r("a", 0), _r("b", 1), _r("c", 0), _r("d", 1), _r("e", 1, infra=True)]
    cur = [_r("a", 1), _r("b", 0), _r("c", 0), _r("d", 1), _r("e", 1)]
    assert [classify_pair(p, c) for p, c in zip(prev[:4], cur[:4])] == ["improved", "regressed", "persistent_fail", "stable_success"]
    mixed = pair_categories(prev, cur, "mixed")
    assert {k: len(v) for k, v in mixed.items()} == {"improved": 1, "regressed": 1, "persistent_fail": 1, "stable_success": 1}
    assert set(pair_categories(prev, cur, "changed")) == {"improved", "regressed"}
    assert set(pair_categories(prev, cur, "unchanged")) == {"persistent_fail", "stable_success"}
    with pytest.raises(ValueError):
        pair_categories(prev, list(reversed(cur)), "mixed")
