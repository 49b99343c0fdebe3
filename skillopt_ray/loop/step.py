"""One training step: rollout on the step's batch, reflect, and — when the analysts proposed something —
aggregate, select, update and gate; then the step is committed (skill version, best skill, counts, appendix notes,
step buffer, step record, state).

Every stage's record is written (through the recorder's memo) before the next stage starts, so a rerun after a
kill loads what was done and recomputes nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict, cast

from skillopt_envs.base import EpisodeResult
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base.stats import GateTestDict
from skillopt_ray.loop import step_buffer
from skillopt_ray.loop.evaluation import Evaluator
from skillopt_ray.loop.recorder import Recorder
from skillopt_ray.loop.schedule import Schedule, Stage
from skillopt_ray.prompts.render import step_buffer_text
from skillopt_ray.runs.payload import Item, LrChoice
from skillopt_ray.runs.records import REJECT, SKIP_NO_PATCHES, SKIP_NO_REWRITE, GateRecord, LrDecision, StepRecord
from skillopt_ray.runs.rundir import STEP_CANDIDATE, STEP_DIFF, RunDir
from skillopt_ray.skill.document import skill_hash
from skillopt_ray.stages.aggregate import AggregateOutput, aggregate
from skillopt_ray.stages.appendix import FlushResult, flush_notes
from skillopt_ray.stages.context import OptimizerContext
from skillopt_ray.stages.reflect import ReflectOutput, reflect
from skillopt_ray.stages.rollout import RolloutStats, summarize
from skillopt_ray.stages.select import SelectOutput, autonomous_lr, rank_and_select, scheduled_lr
from skillopt_ray.stages.update import UpdateOutput, update


class PairedFields(TypedDict, total=False):
    """The paired gate's numbers on a step record (optimizer.gate_test other than none)."""

    gate_diff: float
    gate_diff_lo: float
    gate_diff_hi: float
    gate_p_value: float
    gate_episodes: int  # the sequential gate (optimizer.gate_test=sequential): episodes it paid
    gate_looks: int  # and the looks it took at the paired evidence


class AppendixCounts(TypedDict, total=False):
    """Skill-aware reflection's note counts on a step record."""

    n_execution_lapse_notes: int
    n_appendix_notes_added: int
    n_appendix_notes_total: int
    n_appendix_notes_consolidated: int


def paired_fields(test: Optional[GateTestDict]) -> PairedFields:
    """The paired gate's numbers for the step record (and so the tracker): none without a test."""
    if not test:
        return {}
    return {
        "gate_diff": cast(float, test["mean_diff"]),
        "gate_diff_lo": cast(float, test["lo"]),
        "gate_diff_hi": cast(float, test["hi"]),
        "gate_p_value": cast(float, test["p_value"]),
        **(
            PairedFields(gate_episodes=cast(int, test["episodes"]), gate_looks=cast(int, test["looks"]))
            if test.get("test") == "sequential"
            else {}
        ),
    }


def skill_diff(old: str, new: str) -> str:
    """Unified diff of two skill versions, as a Markdown code block."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), "current", "candidate")
    return "```diff\n" + "".join(lines) + "```\n"


@dataclass
class StepOutcome:
    """What a step's stages produced; the commit turns it into the step record."""

    epoch: int
    step: int
    results: list[EpisodeResult]
    stats: RolloutStats
    refl: ReflectOutput
    agg: Optional[AggregateOutput] = None
    sel: Optional[SelectOutput] = None
    upd: Optional[UpdateOutput] = None
    gate: GateRecord = field(default_factory=lambda: GateRecord(action=SKIP_NO_PATCHES))

    @property
    def label(self) -> str:
        return f"e{self.epoch}s{self.step}"

    @property
    def folder(self) -> str:
        return RunDir.step_dir(self.epoch, self.step)

    def stage(self, name: str) -> str:
        """A stage record's path, relative to the run root."""
        return f"{self.folder}/{name}.json"


class TrainStep:
    def __init__(
        self,
        cfg: Any,
        llm: Any,
        recorder: Recorder,
        evaluator: Evaluator,
        schedule: Schedule,
        guard: Any,
        progress: Callable[..., None],
    ):
        self.cfg, self.o, self.llm = cfg, cfg.optimizer, llm
        self.rec, self.ev, self.schedule = recorder, evaluator, schedule
        self.guard = guard
        self.progress = progress

    async def run(self, epoch: int, step: int) -> None:
        st = self.rec.state
        label = f"e{epoch}s{step}"
        skill = self.rec.current
        tasks = self.schedule.batch(epoch, step)
        gs = st.global_step + 1
        self.progress(phase="train", epoch=epoch, step=step, global_step=gs, total_steps=self.schedule.total_steps())

        async def do_rollout() -> list[JSONObject]:
            self.progress(stage=Stage.ROLLOUT, done=0, total=len(tasks) * self.ev.repeats)
            seed = self.schedule.batch_seed(epoch, step)
            res = await self.ev.play(
                tasks, skill, f"train/{label}", "training", training=True, seed=seed, repeats=self.ev.repeats
            )
            return [r.to_dict() for r in res]

        rel = f"{RunDir.step_dir(epoch, step)}/rollout.json"
        results = [EpisodeResult.from_dict(d) for d in await self.rec.memo(rel, f"{label}:rollout", do_rollout)]
        ctx = OptimizerContext.for_step(
            self.llm,
            self.o,
            self.cfg.env.name,
            skill=skill,
            key=f"train/{label}",
            meta_skill=st.meta_skill,
            step_buffer=step_buffer_text(st.step_buffer),
            batch_seed=self.schedule.batch_seed(epoch, step),
            guard=self.guard,
        )
        stats = summarize(results, self.ev.repeats)
        out = StepOutcome(epoch, step, results, stats, await self._reflect(ctx, epoch, step, results))
        if out.refl.failure_patches or out.refl.success_patches:
            await self._optimize(ctx, out)
        self.rec.ledger = await self.llm.save_ledger()  # per-step token/cost metrics; ledger.json current for resumes
        await self._commit(ctx, out)

    async def _reflect(
        self, ctx: OptimizerContext, epoch: int, step: int, results: list[EpisodeResult]
    ) -> ReflectOutput:
        async def do_reflect() -> ReflectOutput:
            self.progress(stage="reflect")
            return await reflect(ctx, results)

        rel = f"{RunDir.step_dir(epoch, step)}/reflect.json"
        return await self.rec.record(rel, f"e{epoch}s{step}:reflect", ReflectOutput.from_dict, do_reflect)

    async def _optimize(self, ctx: OptimizerContext, out: StepOutcome) -> None:
        """Aggregate, select, update and gate one step whose analysts proposed something."""
        refl, label = out.refl, out.label

        async def do_aggregate() -> AggregateOutput:
            self.progress(stage="aggregate")
            return await aggregate(
                ctx.llm,
                refl.failure_patches,
                refl.success_patches,
                mode=ctx.mode,
                skill=ctx.skill,
                meta_skill=ctx.meta_skill,
                merge_batch_size=ctx.merge_batch_size,
                key=ctx.key,
            )

        out.agg = await self.rec.record(
            out.stage("aggregate"), f"{label}:aggregate", AggregateOutput.from_dict, do_aggregate
        )
        out.sel = await self._select(ctx, out)
        out.upd = await self._update(ctx, out)

        async def do_gate() -> GateRecord:
            assert out.upd is not None  # the update ran just before
            selection = self.schedule.splits.selection
            return await self.ev.gate(out.upd.candidate, self.rec.state, selection, ctx.skill)

        out.gate = await self.rec.record(out.stage("gate"), f"{label}:gate", GateRecord.from_dict, do_gate)
        self.ev.remember(out.gate)  # the sequential gate's extra samples, also when the gate was memoized

    async def _select(self, ctx: OptimizerContext, out: StepOutcome) -> SelectOutput:
        """The step's edit budget (scheduled, or decided by the optimizer) and the ranked edits within it."""
        st, o, agg = self.rec.state, self.o, out.agg
        assert agg is not None  # select runs after aggregate

        async def do_select() -> SelectOutput:
            self.progress(stage="select")
            if ctx.mode == "full_rewrite_minibatch":  # no budget, no ranking, the scheduler does not move
                return SelectOutput(budget=-1, selected=agg.merged, lr_step=st.lr_step)
            decision, lr_step = None, st.lr_step
            if o.lr_control_mode == "autonomous":
                decision = await self._autonomous_lr(ctx, out)
                budget = decision["learning_rate"]
            else:
                lr_step += 1
                budget = scheduled_lr(
                    o.lr_schedule, lr_step, self.schedule.total_steps(), o.learning_rate, o.min_learning_rate
                )
            res = await rank_and_select(
                ctx.llm,
                skill=ctx.skill,
                merged=agg.merged,
                budget=budget,
                mode=ctx.mode,
                meta_skill=ctx.meta_skill,
                key=ctx.key,
            )
            res.lr_decision, res.lr_step = decision, lr_step
            return res

        sel = await self.rec.record(out.stage("select"), f"{out.label}:select", SelectOutput.from_dict, do_select)
        st.lr_step = sel.lr_step
        return sel

    async def _autonomous_lr(self, ctx: OptimizerContext, out: StepOutcome) -> LrChoice:
        decision = await autonomous_lr(
            ctx.llm,
            skill=ctx.skill,
            items=out.agg.items(ctx.mode) if out.agg else [],
            mode=ctx.mode,
            meta_skill=ctx.meta_skill,
            rollout_n=out.stats.n_scored,
            rollout_hard=out.stats.hard,
            rollout_soft=out.stats.soft,
            step_buffer=ctx.step_buffer,
            key=ctx.key,
        )
        entry = {"step": self.rec.state.global_step + 1, "epoch": out.epoch, **decision}
        self.rec.rd.append_lr_decision(LrDecision.from_dict(entry))
        return decision

    async def _update(self, ctx: OptimizerContext, out: StepOutcome) -> UpdateOutput:
        async def do_update() -> UpdateOutput:
            self.progress(stage="update")
            res = await update(
                ctx.llm,
                ctx.skill,
                out.sel.items(ctx.mode) if out.sel else [],
                mode=ctx.mode,
                step_buffer=ctx.step_buffer,
                protect_regions=ctx.protect_regions,
                refuse_echoes=ctx.refuse_echoes,
                key=ctx.key,
            )
            if res.candidate is not None:
                self.rec.rd.write_step_text(out.epoch, out.step, STEP_CANDIDATE, res.candidate)
                self.rec.rd.write_step_text(out.epoch, out.step, STEP_DIFF, skill_diff(ctx.skill, res.candidate))
            return res

        return await self.rec.record(out.stage("update"), f"{out.label}:update", UpdateOutput.from_dict, do_update)

    # ---------------------------------------------------------------- commit
    async def _commit(self, ctx: OptimizerContext, out: StepOutcome) -> None:
        st, rec = self.rec.state, self.rec
        gs = st.global_step + 1
        if out.upd is not None and out.upd.candidate is not None:
            for name in (STEP_CANDIDATE, STEP_DIFF):
                rec.log_artifact(f"{out.folder}/{name}", f"candidates/{out.folder.split('/', 1)[1]}")
        self._apply_gate(out, gs)
        st.counts.dropped_analyses += out.refl.dropped
        st.counts.merge_fallbacks += len(out.agg.fallbacks) if out.agg else 0
        st.counts.rank_fallbacks += int(bool(out.sel and out.sel.fallback))
        notes = await self._flush_notes(out)
        selected = out.sel.items(ctx.mode) if out.sel else []
        if out.gate.action not in (SKIP_NO_PATCHES, SKIP_NO_REWRITE):
            st.step_buffer.append(
                step_buffer.entry(
                    step=gs,
                    action=out.gate.action,
                    results=out.results,
                    analyses=out.refl.analyses,
                    mode=ctx.mode,
                    selected=selected,
                    score_before=cast(float, st.current_score),
                    score_after=cast(float, out.gate.candidate_score),
                )
            )
        st.global_step = gs
        st.step = out.step + 1
        rec.commit_step(self._record(ctx, out, selected, notes))
        self.progress(accept=st.counts.accept, reject=st.counts.reject, skip=st.counts.skip)

    def _apply_gate(self, out: StepOutcome, gs: int) -> None:
        """The gate's decision on the run's position: a new current (and maybe best) skill, and the counts."""
        st, gate = self.rec.state, out.gate
        if gate.accepted:
            st.current_version = self.rec.new_version(cast(str, out.upd.candidate if out.upd else None))
            st.current_score, st.current_eval = gate.candidate_full_score, gate.eval_key or ""
            st.current_origin = f"step_{gs:04d}"
            if gate.new_best:
                self.rec.set_best(st.current_version, st.current_score, gate.eval_key, gs)
            st.counts.accept += 1
        elif gate.action == REJECT:
            st.counts.reject += 1
        else:
            st.counts.skip += 1

    async def _flush_notes(self, out: StepOutcome) -> AppendixCounts:
        """Skill-aware reflection: the step's lapse notes go into the post-gate current skill, ungated."""
        if not self.o.skill_aware_reflection:
            return {}
        st, sd = self.rec.state, out.folder

        async def do_flush() -> FlushResult:
            threshold = self.o.skill_aware_consolidate_threshold
            return await flush_notes(self.llm, self.rec.current, out.refl.notes, threshold, f"train/{sd}")

        rec = await self.rec.record(out.stage("appendix_notes"), f"{sd}:appendix", FlushResult.from_dict, do_flush)
        if rec.skill != self.rec.current:
            st.current_version = self.rec.new_version(rec.skill)
        notes = AppendixCounts(
            n_execution_lapse_notes=len(rec.notes), n_appendix_notes_added=rec.added, n_appendix_notes_total=rec.total
        )
        if rec.consolidated:
            notes["n_appendix_notes_consolidated"] = rec.total
        return notes

    def _record(
        self, ctx: OptimizerContext, out: StepOutcome, selected: list[Item], notes: AppendixCounts
    ) -> StepRecord:
        st, stats, refl, agg, sel, upd, gate = self.rec.state, out.stats, out.refl, out.agg, out.sel, out.upd, out.gate
        cand = upd.candidate if upd else None
        return StepRecord(
            step=st.global_step,
            epoch=out.epoch,
            step_in_epoch=out.step,
            action=gate.action,
            rollout_hard=stats.hard,
            rollout_soft=stats.soft,
            rollout_n=stats.n_scored,
            infra_errors=stats.infra_errors,
            infra_kinds=stats.infra_kinds,
            data_errors=stats.data_errors,
            n_patches=len(refl.failure_patches) + len(refl.success_patches),
            n_failure_patches=len(refl.failure_patches),
            n_success_patches=len(refl.success_patches),
            n_edits_merged=len(agg.items(ctx.mode)) if agg else 0,
            n_edits_ranked=len(selected),
            edit_budget=sel.budget if sel and sel.budget >= 0 else None,
            lr_control_mode=self.o.lr_control_mode,
            lr_decision=sel.lr_decision if sel else None,
            support_counts=[it.get("support_count") for it in selected if isinstance(it, dict)],
            candidate_hash=skill_hash(cand) if cand is not None else None,
            candidate_skill_len=len(cand) if cand is not None else None,
            edit_apply_summary=upd.summary if upd else {},
            rewrite_change_summary=upd.change_summary if upd else [],
            selection_hard=gate.selection_hard,
            selection_soft=gate.selection_soft,
            gate_metric=self.ev.policy.metric,
            candidate_gate_score=gate.candidate_score,
            tasks_compared=gate.tasks_compared,
            current_score=st.current_score,
            best_score=st.best_score,
            best_step=st.best_step,
            current_origin=st.current_origin,
            best_origin=st.best_origin,
            skill_version=st.current_version,
            skill_len=len(self.rec.current),
            **notes,
            **paired_fields(gate.gate_test),
        )
