"""The progress line counts episodes only while a stage plays them."""

from __future__ import annotations

from skillopt_ray.cli import Progress
from skillopt_ray.driver import plays_episodes


def test_episode_stages():
    for stage in ("rollout", "validate:selection", "validate:test:initial", "slow_update:rollout"):
        assert plays_episodes(stage), stage
    for stage in ("reflect", "aggregate", "select", "update", "gate", "meta_skill", "slow_update", ""):
        assert not plays_episodes(stage), stage


def test_progress_line_shows_episodes_only_when_counted():
    p = Progress("off")
    during = p.line({"phase": "train", "epoch": 1, "global_step": 1, "total_steps": 4, "stage": "rollout", "done": 3, "total": 8})
    assert "episodes 3/8" in during and "rollout" in during
    after = p.line({"phase": "train", "epoch": 1, "global_step": 1, "total_steps": 4, "stage": "reflect"})
    assert "episodes" not in after and "reflect" in after
