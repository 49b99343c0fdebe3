"""The schedule: the splits, the order batches are drawn in, and the episodes a run plans to play.

The train split is shuffled with Random(seed + 1000·epoch) and cut into consecutive batches; each step's
minibatches are shuffled with its own batch seed. `EpisodePlan` counts what the schedule will play, for the
progress display's overall bar and ETA.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from skillopt_envs.base import Task

from skillopt_ray.runs.records import Progress


class Stage:
    """The loop's stages as the progress display sees them: one spelling, for the loop that reports them and the
    episode plan that counts them."""

    ROLLOUT = "rollout"  # a step's batch
    OPTIMIZE = ("reflect", "aggregate", "select", "update", "gate")  # a step's optimizer stages
    SELECTION = "validate:selection"  # a skill scored on the selection split
    TESTS = ("validate:test:initial", "validate:test:best", "validate:test:final")  # the final skills on test
    SLOW_UPDATE = "slow_update"
    META_SKILL = "meta_skill"

    @staticmethod
    def validate(what: str) -> str:
        """A skill scored on a split: `what` is 'selection' or 'test:<initial|best|final>'."""
        return f"validate:{what}"

    @staticmethod
    def pairs(who: str) -> str:
        """The epoch boundary's paired rollouts, played for the slow update ('slow') or the meta skill ('meta')."""
        return f"{who}:rollout"

    @staticmethod
    def is_pairs(stage: str) -> bool:
        return stage.endswith(":rollout")


@dataclass
class Splits:
    train: list[Task]
    selection: list[Task]
    test: list[Task]


def limit_tasks(tasks: list[Task], n: int) -> list[Task]:
    """First n tasks taken round-robin over task types, so small limits still cover every type."""
    if not n or n >= len(tasks):
        return tasks
    by_type: dict[str, list[Task]] = {}
    for t in tasks:
        by_type.setdefault(t.task_type, []).append(t)
    picked: list[Task] = []
    queues = list(by_type.values())
    while len(picked) < n:
        for q in queues:
            if q and len(picked) < n:
                picked.append(q.pop(0))
    return picked


@dataclass(frozen=True)
class Schedule:
    o: Any  # the optimizer config (batch_size, epochs, slow update and meta skill settings)
    splits: Splits
    seed: int

    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(len(self.splits.train) / self.o.batch_size))

    def total_steps(self) -> int:
        return self.o.epochs * self.steps_per_epoch()

    def batch(self, epoch: int, step: int) -> list[Task]:
        """The train split shuffled with Random(seed + 1000·epoch), cut into consecutive batches."""
        order = list(self.splits.train)
        random.Random(self.seed + 1000 * epoch).shuffle(order)
        b = self.o.batch_size
        return order[(step - 1) * b : step * b]

    def batch_seed(self, epoch: int, step: int) -> int:
        """Seeds the shuffle of a step's episodes into minibatches."""
        return self.seed + 1000 * epoch + (step - 1) + 1

    def boundary_samples(self) -> int:
        """Train tasks each epoch boundary compares the previous and the current skill on."""
        return min(self.o.slow_update_samples, len(self.splits.train))

    def plan(self) -> EpisodePlan:
        o, splits = self.o, self.splits
        n_train, b = len(splits.train), o.batch_size
        r = getattr(o, "rollouts_per_task", 1)  # every task's episodes but the boundary's pairs are repeated
        batches = [r * max(0, min(b, n_train - i * b)) for i in range(self.steps_per_epoch())]
        pairs = 2 * self.boundary_samples() if (o.slow_update or o.meta_skill) else 0
        sel = r * len(splits.selection)
        gate = sel if o.slow_update and (o.slow_update_gate or o.slow_update_force_validate) else 0
        return EpisodePlan(sel, r * len(splits.test), batches, o.epochs, pairs + gate, pairs)


@dataclass
class EpisodePlan:
    """Episodes a training run plays, as planned (an upper bound: skipped gates and cached scores play none).

    baseline selection, then per step its batch and the gate's selection pass, at each epoch boundary
    from epoch 2 the paired rollouts (and the slow update's selection pass), at the end the final
    skill's selection pass and the initial, best and final skills on test."""

    selection: int
    test: int
    batches: list[int]
    epochs: int
    boundary: int  # per epoch boundary from epoch 2
    pairs: int = 0  # the boundary's paired rollouts (part of `boundary`)

    @property
    def total(self) -> int:
        steps = sum(self.batches) + len(self.batches) * self.selection
        return (
            self.selection
            + self.epochs * steps
            + max(0, self.epochs - 1) * self.boundary
            + self.selection
            + 3 * self.test
        )

    def done(self, state: Any, snap: Progress) -> int:
        """Planned episodes behind the run's position: `state` is the trainer's RunState, `snap` the live progress."""
        stage = str(snap.get("stage") or "")
        in_stage = int(snap.get("done") or 0)
        sel, per_epoch = self.selection, len(self.batches)
        if state.phase == "done":
            return self.total
        if state.initial_score is None:
            return in_stage if stage == Stage.SELECTION else 0
        n = sel
        for i in range(state.global_step):
            n += self.batches[i % per_epoch] + sel
        boundaries_done = self.epochs if state.phase != "train" else state.epoch - 1
        n += max(0, boundaries_done - 1) * self.boundary
        if state.phase == "final":
            if stage == Stage.SELECTION:
                return n + in_stage
            if stage in Stage.TESTS:
                return n + sel + Stage.TESTS.index(stage) * self.test + in_stage
            return n
        phase = snap.get("phase")
        if phase == "epoch_boundary" and state.epoch >= 2:
            if Stage.is_pairs(stage):
                return n + min(in_stage, self.pairs)
            if stage == Stage.SELECTION:
                return n + self.pairs + in_stage
            if stage in (Stage.SLOW_UPDATE, Stage.META_SKILL):
                return n + self.pairs
            return n
        if phase == "train" and state.step <= per_epoch:
            batch = self.batches[state.step - 1]
            if stage == Stage.ROLLOUT:
                return n + in_stage
            if stage == Stage.SELECTION:
                return n + batch + in_stage
            if stage in Stage.OPTIMIZE:
                return n + batch
        return n
