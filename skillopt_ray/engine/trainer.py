"""The training loop. Reads like single-process code: the loop's parts (skillopt_ray.loop) and the stages do the
work, and this module only says in which order.

Every stage of every step writes its record to the run directory before the next starts, and the run state is
committed after each gate and each epoch-boundary stage. A rerun loads finished stage records instead of
recomputing them, and the LLM cache answers any call a half-finished stage already paid for — so a resumed run
ends exactly where an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, cast

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.config import Config
from skillopt_ray.loop.boundary import EpochBoundary
from skillopt_ray.loop.evaluation import Evaluator
from skillopt_ray.loop.final import FinalEvaluation
from skillopt_ray.loop.recorder import Recorder, SimulatedInterrupt
from skillopt_ray.loop.schedule import Schedule, Splits, limit_tasks
from skillopt_ray.loop.step import TrainStep
from skillopt_ray.prompts.length_guard import LengthGuard
from skillopt_ray.runs.records import Progress
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.state import RunState
from skillopt_ray.runs.tracking import Tracker  # noqa: E402
from skillopt_ray.skill.document import inject_empty_appendix_field
from skillopt_ray.stages.gate import GatePolicy, deterministic_target
from skillopt_ray.stages.judge import Judge

__all__ = ["SimulatedInterrupt", "Splits", "Trainer", "limit_tasks"]


class Trainer:
    def __init__(
        self,
        cfg: Config,
        rundir: RunDir,
        llm: Any,
        runner: Any,
        tracker: Tracker,
        splits: Splits,
        seed_skill: str,
        on_progress: Optional[Callable[[Progress], None]] = None,
    ):
        self.cfg = cfg
        self.rd = rundir
        self.llm = llm
        self.splits = splits
        self.seed_skill = seed_skill
        self._on_progress = on_progress
        o = cfg.optimizer
        guard = LengthGuard.for_role(cfg.llm.optimizer)  # off unless llm.optimizer.context_tokens is set
        self.schedule = Schedule(o, splits, cfg.seed)
        self.recorder = Recorder(rundir, tracker, cfg.debug.interrupt_after)
        target = cfg.llm.target
        deterministic = deterministic_target(target.harness, target.temperature)
        self.policy = GatePolicy.from_config(o, len(splits.selection), deterministic)
        self.evaluator = Evaluator(
            rundir, runner, self.policy, cfg.env, o.max_infra_failure_fraction, self._set_progress, seed=cfg.seed,
            max_data_fraction=o.max_data_error_fraction, judge=Judge(llm),
        )  # fmt: skip
        parts = (cfg, llm, self.recorder, self.evaluator, self.schedule)
        self.steps = TrainStep(*parts, guard, self._set_progress)
        self.boundary = EpochBoundary(*parts, guard, self._set_progress)
        self.final = FinalEvaluation(*parts, self._set_progress)

    def _set_progress(self, **kw: Any) -> None:
        if self._on_progress:
            self._on_progress(cast(Progress, kw))  # the stages name Progress keys

    @property
    def state(self) -> RunState:
        return self.recorder.state

    @property
    def current(self) -> str:
        """The current skill's text."""
        return self.recorder.current

    async def init_state(self) -> None:
        """Resume from the run directory, or start: the seed skill as version 0 (and, with skill-aware reflection,
        the current skill with an empty appendix block; version 0 stays the raw file)."""
        if self.recorder.resume():
            self.evaluator.load()
            return
        rec = self.recorder
        rec.write_seed(self.seed_skill)
        if self.cfg.optimizer.skill_aware_reflection:
            rec.state.current_version = rec.state.epoch_start_version = rec.new_version(
                inject_empty_appendix_field(self.seed_skill)
            )
        rec.save()

    async def run(self) -> JSONObject:
        try:
            return await self._run()
        finally:
            self.evaluator.save_judge()

    async def _run(self) -> JSONObject:
        await self.init_state()
        st = self.state
        if st.initial_score is None:
            await self.baseline()
        while st.phase == "train":
            if st.step <= self.schedule.steps_per_epoch():
                await self.steps.run(st.epoch, st.step)
            else:
                await self.boundary.run(st.epoch)
        if st.phase == "final":
            await self.final.run()
        summary = self.rd.read_summary()
        return summary.to_dict() if summary is not None else {}

    async def baseline(self) -> None:
        """The raw initial skill on the whole selection split: the first current and best scores."""
        st, rec = self.state, self.recorder
        key, base = await self.evaluator.evaluate(rec.skill_text(0), self.splits.selection, "selection")
        s = self.policy.score(base)
        st.initial_score = st.current_score = st.best_score = s
        st.current_eval = st.best_eval = key
        rec.rd.write_best_skill(rec.skill_text(0))
        rec.save()
        rec.log_metrics({"selection_score": s}, 0)
