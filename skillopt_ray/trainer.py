"""The training loop (REFERENCE_SPEC §1). Reads like single-process code; the stages and actors do the work.

Every stage of every step writes its record to the run directory before the next starts, and the
run state is committed after each gate and each epoch-boundary stage. A rerun loads finished stage
records instead of recomputing them, and the LLM cache answers any call a half-finished stage
already paid for — so a resumed run ends exactly where an uninterrupted one would.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Optional

from skillopt_envs.base import EpisodeContext, EpisodeResult, Task

from skillopt_ray import prompts, step_buffer
from skillopt_ray.config import Config
from skillopt_ray.epoch.meta_skill import write_meta_skill
from skillopt_ray.epoch.slow_update import build_pairs, keep, sample_tasks, write_slow_update
from skillopt_ray.prompts.length_guard import LengthGuard
from skillopt_ray.prompts.render import step_buffer_text
from skillopt_ray.rundir import RunDir
from skillopt_ray.skill.appendix import flush_notes
from skillopt_ray.skill.document import (
    extract_slow_update_field,
    inject_empty_appendix_field,
    inject_empty_slow_update_field,
    replace_slow_update_field,
    skill_hash,
)
from skillopt_ray.stages import gate as gate_stage
from skillopt_ray.stages.aggregate import AggregateOutput, aggregate
from skillopt_ray.stages.reflect import ReflectOutput, reflect
from skillopt_ray.stages.rollout import rollout, summarize
from skillopt_ray.stages.select import SelectOutput, autonomous_lr, rank_and_select, scheduled_lr
from skillopt_ray.stages.update import UpdateOutput, update
from skillopt_ray.state import RunState
from skillopt_ray.tracking import Tracker
from skillopt_ray.utils.io import append_json_line

HISTORY_FILE = "history.jsonl"
SCORES_FILE = "scores.jsonl"
SKIP_NO_PATCHES = "skip_no_patches"
SKIP_NO_REWRITE = "skip_no_rewrite"


class SimulatedInterrupt(RuntimeError):
    """Raised by debug.interrupt_after to test resume at an exact point."""


@dataclass
class Splits:
    train: list[Task]
    selection: list[Task]
    test: list[Task]


def _limit(tasks: list[Task], n: int) -> list[Task]:
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


def skill_diff(old: str, new: str) -> str:
    """Unified diff of two skill versions, as a Markdown code block."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), "current", "candidate")
    return "```diff\n" + "".join(lines) + "```\n"


def _results(data: list[dict[str, Any]]) -> list[EpisodeResult]:
    return [EpisodeResult.from_dict(d) for d in data]


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
        on_progress: Optional[Callable[[dict[str, Any]], None]] = None,
    ):
        self.cfg = cfg
        self.o = cfg.optimizer
        self.rd = rundir
        self.llm = llm
        self.runner = runner
        self.tracker = tracker
        self.splits = splits
        self.seed_skill = seed_skill
        self._on_progress = on_progress
        self.state = RunState()
        self.history: list[dict[str, Any]] = []  # one record per completed step (history.jsonl)
        self.scores: dict[str, dict[str, Any]] = {}  # evaluation key -> stats (scores.jsonl): the score cache
        self._ledger: dict[str, Any] = {}  # last ledger snapshot from the gateway
        self._t0 = time.monotonic()
        self._wall_prior = 0.0
        self.guard = LengthGuard.for_role(cfg.llm.optimizer)  # off unless llm.optimizer.context_tokens is set

    # ---------- helpers ----------
    def _set_progress(self, **kw: Any) -> None:
        if self._on_progress:
            self._on_progress(kw)

    def _checkpoint(self, label: str) -> None:
        if self.cfg.debug.interrupt_after == label:
            raise SimulatedInterrupt(f"interrupted after {label} (debug.interrupt_after)")

    async def _memo(self, rel: str, label: str, compute: Callable[[], Awaitable[Any]]) -> Any:
        """Load a finished stage record, or compute and persist it."""
        existing = self.rd.read_json(rel)
        if existing is not None:
            return existing
        data = await compute()
        self.rd.write_json(rel, data)
        self._checkpoint(label)
        return data

    def skill_text(self, version: int) -> str:
        return self.rd.skill_path(version).read_text(encoding="utf-8")

    @property
    def current(self) -> str:
        return self.skill_text(self.state.current_version)

    def _ctx(self, key: str, training: bool, seed: Optional[int] = None) -> EpisodeContext:
        """Episode settings; `seed` is the batch's seed (a training batch's, or the epoch sample's), else the run's."""
        return EpisodeContext(
            key=key,
            training=training,
            max_turns=self.cfg.env.max_turns,
            history_window=self.cfg.env.history_window,
            seed=self.cfg.seed if seed is None else seed,
        )

    def score_of(self, ev: dict[str, Any]) -> float:
        return gate_stage.gate_score(ev["hard"], ev["soft"], self.o.gate_metric, self.o.mixed_weight)

    def _split_sig(self, tasks: list[Task]) -> str:
        blob = "|".join(t.task_id for t in tasks) + f"|{self.cfg.env.max_turns}|{self.cfg.env.history_window}"
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    async def evaluate(
        self, skill: str, tasks: list[Task], what: str, stop: Optional[Callable[[EpisodeResult], bool]] = None
    ) -> tuple[str, dict[str, Any]]:
        """Score a skill on a split, cached by skill content hash and split signature (§9.3). With `stop`, the
        episodes left once it says so are not played; such a partial evaluation is returned, never cached."""
        key = f"{skill_hash(skill)}|{self._split_sig(tasks)}"
        if key not in self.scores:
            self._set_progress(stage=f"validate:{what}", done=0, total=len(tasks))
            res = await rollout(
                self.runner,
                tasks,
                skill,
                self._ctx(f"eval/{skill_hash(skill)}", False),
                self.o.max_infra_failure_fraction,
                what,
                stop,
            )
            stats = summarize(res).to_dict()
            if stats["not_played"]:
                return key, stats
            self.scores[key] = stats
            append_json_line(self.rd.root / SCORES_FILE, {"key": key, "eval": self.scores[key]})
        return key, self.scores[key]

    def compare(self, cand: dict[str, Any]) -> tuple[float, float, float, int]:
        """(candidate, current, best) gate scores for a decision, and the number of tasks compared.

        Without infra or data errors on either side these are the reference's numbers: the candidate's
        mean and the stored current and best scores. Otherwise each side is scored on the tasks both
        sides scored, so an infrastructure failure never moves a decision."""
        st = self.state
        cur, best = self.scores.get(st.current_eval), self.scores.get(st.best_eval)
        n = len(self.splits.selection)
        if cur is None or (cand["n_scored"] == n and cur["n_scored"] == n and (best is None or best["n_scored"] == n)):
            return self.score_of(cand), st.current_score, st.best_score, cand["n_scored"]
        c, cur_s, common = gate_stage.like_for_like(cand, cur, self.o.gate_metric, self.o.mixed_weight)
        best_s = (
            gate_stage.like_for_like(cand, best, self.o.gate_metric, self.o.mixed_weight)[1] if best else st.best_score
        )
        return c, cur_s, best_s, common

    def certain_reject(self) -> Optional[Callable[[EpisodeResult], bool]]:
        """With the hard gate and `optimizer.gate_early_stop`: a predicate that says when a candidate has lost
        so many selection episodes that, winning all the rest, it still could not beat the current score
        (ties reject). It counts only tasks the current skill's evaluation scored; a task dropped later for an
        infrastructure failure removes at most one of the current skill's wins, so the verdict stands."""
        o, st = self.o, self.state
        if not (o.gate_early_stop and o.use_gate and o.gate_metric == "hard"):
            return None
        cur = self.scores[st.current_eval]["tasks"]
        cur_wins = sum(v[0] for v in cur.values())
        lost = [0.0]

        def stop(r: EpisodeResult) -> bool:
            if r.scored and r.task_id in cur:
                lost[0] += 1.0 - r.hard
            return len(cur) - lost[0] <= cur_wins

        return stop

    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(len(self.splits.train) / self.o.batch_size))

    def total_steps(self) -> int:
        return self.o.epochs * self.steps_per_epoch()

    def _batch(self, epoch: int, step: int) -> list[Task]:
        """§1.2: the train split shuffled with Random(seed + 1000·epoch), cut into consecutive batches."""
        order = list(self.splits.train)
        random.Random(self.cfg.seed + 1000 * epoch).shuffle(order)
        b = self.o.batch_size
        return order[(step - 1) * b : step * b]

    def _batch_seed(self, epoch: int, step: int) -> int:
        return self.cfg.seed + 1000 * epoch + (step - 1) + 1

    def _new_version(self, text: str) -> int:
        st = self.state
        v = st.next_version
        self.rd.write_skill(v, text)
        st.next_version = v + 1
        self.tracker.log_artifact(self.rd.skill_path(v), "skills")
        return v

    def _set_best(self, version: int, score: float, eval_key: str, step: int) -> None:
        st = self.state
        st.best_version, st.best_score, st.best_eval, st.best_step = version, score, eval_key, step
        st.best_origin = st.current_origin
        self.rd.write_text("best_skill.md", self.skill_text(version))
        self.tracker.log_artifact(self.rd.root / "best_skill.md")

    def _save(self) -> None:
        self.state.wall_time_s = self._wall_prior + (time.monotonic() - self._t0)
        self.rd.write_state(self.state)

    # ---------- run ----------
    async def init_state(self) -> None:
        saved = self.rd.read_state()
        if saved is not None:
            self.state = saved
            self._wall_prior = self.state.wall_time_s
            self.history = [h.to_dict() for h in self.rd.history(upto=self.state.global_step)]
            self.scores = {k: v.to_dict() for k, v in self.rd.scores().items()}
            return
        self.state = RunState()
        self.rd.write_skill(0, self.seed_skill)
        self.tracker.log_artifact(self.rd.skill_path(0), "skills")
        if self.o.skill_aware_reflection:  # the appendix goes into current only; S_0 stays the raw file (QUIRK-23)
            self.state.current_version = self.state.epoch_start_version = self._new_version(
                inject_empty_appendix_field(self.seed_skill)
            )
        self._save()

    async def run(self) -> dict[str, Any]:
        await self.init_state()
        st = self.state
        if st.initial_score is None:  # baseline: the raw initial skill on the whole selection split
            key, base = await self.evaluate(self.skill_text(0), self.splits.selection, "selection")
            s = self.score_of(base)
            st.initial_score = st.current_score = st.best_score = s
            st.current_eval = st.best_eval = key
            self.rd.write_text("best_skill.md", self.skill_text(0))
            self._save()
            self.tracker.log_metrics({"selection_score": s}, 0)
        while st.phase == "train":
            if st.step <= self.steps_per_epoch():
                await self.train_step(st.epoch, st.step)
            else:
                await self.epoch_boundary(st.epoch)
        if st.phase == "final":
            await self.final_evaluation()
        return self.rd.summary() or {}

    async def train_step(self, epoch: int, step: int) -> None:
        st, o = self.state, self.o
        sd = self.rd.step_dir(epoch, step)
        label = f"e{epoch}s{step}"
        key = f"train/{label}"
        skill = self.current
        tasks = self._batch(epoch, step)
        mode = o.update_mode
        gs = st.global_step + 1
        self._set_progress(phase="train", epoch=epoch, step=step, global_step=gs, total_steps=self.total_steps())

        async def do_rollout() -> list[dict[str, Any]]:
            self._set_progress(stage="rollout", done=0, total=len(tasks))
            res = await rollout(
                self.runner,
                tasks,
                skill,
                self._ctx(key, True, self._batch_seed(epoch, step)),
                o.max_infra_failure_fraction,
                "training",
            )
            return [r.to_dict() for r in res]

        results = _results(await self._memo(f"{sd}/rollout.json", f"{label}:rollout", do_rollout))
        stats = summarize(results)
        buffer_text = step_buffer_text(st.step_buffer)

        async def do_reflect() -> dict[str, Any]:
            self._set_progress(stage="reflect")
            out = await reflect(
                self.llm,
                results,
                skill=skill,
                mode=mode,
                env=self.cfg.env.name,
                minibatch_size=o.minibatch_size,
                batch_seed=self._batch_seed(epoch, step),
                max_budget=o.learning_rate,
                step_buffer=buffer_text,
                meta_skill=st.meta_skill,
                failure_only=o.failure_only,
                skill_aware=o.skill_aware_reflection,
                appendix_source=o.skill_aware_appendix_source,
                key=key,
                guard=self.guard,
            )
            return out.to_dict()

        refl = ReflectOutput.from_dict(await self._memo(f"{sd}/reflect.json", f"{label}:reflect", do_reflect))
        agg: Optional[AggregateOutput] = None
        sel: Optional[SelectOutput] = None
        upd: Optional[UpdateOutput] = None
        gate: dict[str, Any] = {"action": SKIP_NO_PATCHES}
        if refl.failure_patches or refl.success_patches:
            agg, sel, upd, gate = await self._optimize(epoch, step, skill, stats, refl, buffer_text)
        await self.refresh_ledger()  # per-step token/cost metrics, and ledger.json current for budget resumes
        await self._commit_step(epoch, step, results, stats, refl, agg, sel, upd, gate)

    async def _optimize(
        self, epoch: int, step: int, skill: str, stats: Any, refl: ReflectOutput, buffer_text: str
    ) -> tuple[AggregateOutput, SelectOutput, UpdateOutput, dict[str, Any]]:
        """Aggregate, select, update and gate one step whose analysts proposed something."""
        st, o = self.state, self.o
        sd, label, key, mode = (
            self.rd.step_dir(epoch, step),
            f"e{epoch}s{step}",
            f"train/e{epoch}s{step}",
            o.update_mode,
        )

        async def do_aggregate() -> dict[str, Any]:
            self._set_progress(stage="aggregate")
            out = await aggregate(
                self.llm,
                refl.failure_patches,
                refl.success_patches,
                mode=mode,
                skill=skill,
                meta_skill=st.meta_skill,
                merge_batch_size=o.merge_batch_size,
                key=key,
            )
            return out.to_dict()

        agg = AggregateOutput.from_dict(await self._memo(f"{sd}/aggregate.json", f"{label}:aggregate", do_aggregate))

        async def do_select() -> dict[str, Any]:
            self._set_progress(stage="select")
            items = agg.items(mode)
            if mode == "full_rewrite_minibatch":  # no budget, no ranking, the scheduler does not move
                return {**SelectOutput(budget=-1, selected=agg.merged).to_dict(), "lr_step": st.lr_step}
            decision, lr_step = None, st.lr_step
            if o.lr_control_mode == "autonomous":
                decision = await autonomous_lr(
                    self.llm,
                    skill=skill,
                    items=items,
                    mode=mode,
                    meta_skill=st.meta_skill,
                    rollout_n=stats.n_scored,
                    rollout_hard=stats.hard,
                    rollout_soft=stats.soft,
                    step_buffer=buffer_text,
                    key=key,
                )
                budget = decision["learning_rate"]
                append_json_line(
                    self.rd.root / "lr_history.jsonl", {"step": st.global_step + 1, "epoch": epoch, **decision}
                )
            else:
                lr_step += 1
                budget = scheduled_lr(o.lr_schedule, lr_step, self.total_steps(), o.learning_rate, o.min_learning_rate)
            out = await rank_and_select(
                self.llm, skill=skill, merged=agg.merged, budget=budget, mode=mode, meta_skill=st.meta_skill, key=key
            )
            out.lr_decision = decision
            return {**out.to_dict(), "lr_step": lr_step}

        sel_rec = await self._memo(f"{sd}/select.json", f"{label}:select", do_select)
        sel = SelectOutput.from_dict({k: v for k, v in sel_rec.items() if k != "lr_step"})
        st.lr_step = sel_rec["lr_step"]

        async def do_update() -> dict[str, Any]:
            self._set_progress(stage="update")
            out = await update(
                self.llm,
                skill,
                sel.items(mode),
                mode=mode,
                step_buffer=buffer_text,
                protect_regions=o.protect_regions_in_rewrites,
                key=key,
            )
            if out.candidate is not None:
                self.rd.write_text(f"{sd}/candidate.md", out.candidate)
                self.rd.write_text(f"{sd}/diff.md", skill_diff(skill, out.candidate))
            return out.to_dict()

        upd = UpdateOutput.from_dict(await self._memo(f"{sd}/update.json", f"{label}:update", do_update))

        async def do_gate() -> dict[str, Any]:
            if upd.candidate is None:
                return {"action": SKIP_NO_REWRITE}
            self._set_progress(stage="gate")
            eval_key, ev = await self.evaluate(upd.candidate, self.splits.selection, "selection", self.certain_reject())
            if ev["not_played"]:  # stopped early: rejected for certain, its full score never measured
                cur_tasks = self.scores[st.current_eval]["tasks"]
                lost = sum(1.0 - v[0] for t, v in ev["tasks"].items() if t in cur_tasks)
                bound = (len(cur_tasks) - lost) / len(cur_tasks)
                return {
                    "action": gate_stage.REJECT,
                    "candidate_score": bound,
                    "current_score": st.current_score,
                    "best_score": st.best_score,
                    "eval_key": None,
                    "early_stopped": True,
                    "episodes_not_played": ev["not_played"],
                    "reason": f"rejected early: after {ev['n_scored']} of {ev['n']} selection episodes the candidate could reach "
                    f"at most {bound:.4f}, not above the current {st.current_score:.4f} (hard gate; ties reject)",
                    "selection_hard": None,
                    "selection_soft": None,
                    "candidate_full_score": None,
                    "tasks_compared": ev["n_scored"],
                    "gate_metric": o.gate_metric,
                }
            cand, cur, best, n = self.compare(ev)
            d = gate_stage.decide(cand, cur, best, o.use_gate)
            return {
                **d.to_dict(),
                "reason": gate_stage.reason(d.action, cand, cur, best, o.gate_metric, n),
                "flipped": gate_stage.flipped(ev, self.scores[st.current_eval]),
                "eval_key": eval_key,
                "selection_hard": ev["hard"],
                "selection_soft": ev["soft"],
                "candidate_full_score": self.score_of(ev),
                "tasks_compared": n,
                "candidate_scored": ev["n_scored"],
                "current_scored": self.scores.get(st.current_eval, {}).get("n_scored"),
                "gate_metric": o.gate_metric,
            }

        gate = await self._memo(f"{sd}/gate.json", f"{label}:gate", do_gate)
        return agg, sel, upd, gate

    async def _commit_step(
        self,
        epoch: int,
        step: int,
        results: list[EpisodeResult],
        stats: Any,
        refl: ReflectOutput,
        agg: Optional[AggregateOutput],
        sel: Optional[SelectOutput],
        upd: Optional[UpdateOutput],
        gate: dict[str, Any],
    ) -> None:
        st, o, mode = self.state, self.o, self.o.update_mode
        gs = st.global_step + 1
        sd = self.rd.step_dir(epoch, step)
        action = gate["action"]
        if upd is not None and upd.candidate is not None:
            for name in ("candidate.md", "diff.md"):
                self.tracker.log_artifact(self.rd.root / sd / name, f"candidates/{sd.split('/', 1)[1]}")
        if gate_stage.is_accepted(action):
            st.current_version = self._new_version(upd.candidate)
            st.current_score, st.current_eval = gate["candidate_full_score"], gate["eval_key"]
            st.current_origin = f"step_{gs:04d}"
            if action == gate_stage.ACCEPT_NEW_BEST or (
                action == gate_stage.FORCE_ACCEPT and gate["candidate_score"] > gate["best_score"]
            ):
                self._set_best(st.current_version, st.current_score, gate["eval_key"], gs)
            st.counts.accept += 1
        elif action == gate_stage.REJECT:
            st.counts.reject += 1
        else:
            st.counts.skip += 1
        st.counts.dropped_analyses += refl.dropped
        st.counts.merge_fallbacks += len(agg.fallbacks) if agg else 0
        st.counts.rank_fallbacks += int(bool(sel and sel.fallback))
        notes_rec = await self._flush_notes(sd, refl)
        if action not in (SKIP_NO_PATCHES, SKIP_NO_REWRITE):
            st.step_buffer.append(
                step_buffer.entry(
                    step=gs,
                    action=action,
                    results=results,
                    analyses=refl.analyses,
                    mode=mode,
                    selected=sel.items(mode) if sel else [],
                    score_before=st.current_score,
                    score_after=gate.get("candidate_score"),
                )
            )
        st.global_step = gs
        st.step = step + 1
        selected = sel.items(mode) if sel else []
        record = {
            "step": gs,
            "epoch": epoch,
            "step_in_epoch": step,
            "action": action,
            "rollout_hard": stats.hard,
            "rollout_soft": stats.soft,
            "rollout_n": stats.n_scored,
            "infra_errors": stats.infra_errors,
            "infra_kinds": stats.infra_kinds,
            "data_errors": stats.data_errors,
            "n_patches": len(refl.failure_patches) + len(refl.success_patches),
            "n_failure_patches": len(refl.failure_patches),
            "n_success_patches": len(refl.success_patches),
            "n_edits_merged": len(agg.items(mode)) if agg else 0,
            "n_edits_ranked": len(selected),
            "edit_budget": sel.budget if sel and sel.budget >= 0 else None,
            "lr_control_mode": o.lr_control_mode,
            "lr_decision": sel.lr_decision if sel else None,
            "support_counts": [it.get("support_count") for it in selected if isinstance(it, dict)],
            "candidate_hash": skill_hash(upd.candidate) if upd and upd.candidate is not None else None,
            "candidate_skill_len": len(upd.candidate) if upd and upd.candidate is not None else None,
            "edit_apply_summary": upd.summary if upd else {},
            "rewrite_change_summary": upd.change_summary if upd else [],
            "selection_hard": gate.get("selection_hard"),
            "selection_soft": gate.get("selection_soft"),
            "gate_metric": o.gate_metric,
            "candidate_gate_score": gate.get("candidate_score"),
            "tasks_compared": gate.get("tasks_compared"),
            "current_score": st.current_score,
            "best_score": st.best_score,
            "best_step": st.best_step,
            "current_origin": st.current_origin,
            "best_origin": st.best_origin,
            "skill_version": st.current_version,
            "skill_len": len(self.current),
            **notes_rec,
        }
        self.history.append(record)
        append_json_line(self.rd.root / HISTORY_FILE, record)  # before the state commit: a rerun replaces it
        self._save()
        self.rd.write_json(f"{sd}/step_record.json", record)
        metrics = {
            k: float(v)
            for k, v in record.items()
            if isinstance(v, (int, float))
            and not isinstance(v, bool)
            and v is not None
            and k not in ("epoch", "step", "step_in_epoch", "best_step")
        }
        metrics["accepted"] = 1.0 if gate_stage.is_accepted(action) else 0.0
        metrics["wall_time_s"] = st.wall_time_s
        self._log_ledger_metrics(metrics)
        self.tracker.log_metrics(metrics, gs)
        self._set_progress(accept=st.counts.accept, reject=st.counts.reject, skip=st.counts.skip)

    async def _flush_notes(self, sd: str, refl: ReflectOutput) -> dict[str, Any]:
        """Skill-aware reflection: the step's lapse notes go into the post-gate current skill, ungated (§12)."""
        if not self.o.skill_aware_reflection:
            return {}
        st = self.state

        async def do_flush() -> dict[str, Any]:
            res = await flush_notes(
                self.llm, self.current, refl.notes, self.o.skill_aware_consolidate_threshold, f"train/{sd}"
            )
            return res.to_dict()

        rec = await self._memo(f"{sd}/appendix_notes.json", f"{sd}:appendix", do_flush)
        if rec["skill"] != self.current:
            st.current_version = self._new_version(rec["skill"])
        out = {
            "n_execution_lapse_notes": len(rec["notes"]),
            "n_appendix_notes_added": rec["added"],
            "n_appendix_notes_total": rec["total"],
        }
        if rec["consolidated"]:
            out["n_appendix_notes_consolidated"] = rec["total"]
        return out

    def _log_ledger_metrics(self, metrics: dict[str, float]) -> None:
        snap = self._ledger
        if snap:
            metrics["tokens_total"] = snap["totals"]["tokens"]
            metrics["cost_usd_total"] = snap["totals"]["cost_usd"]
            for k, e in snap["entries"].items():
                metrics[f"tokens.{k.replace('/', '.')}"] = e["prompt_tokens"] + e["completion_tokens"]

    async def refresh_ledger(self) -> dict[str, Any]:
        self._ledger = await self.llm.save_ledger()
        return self._ledger

    # ---------- epoch boundary (§1.2, §10, §11) ----------
    async def epoch_boundary(self, epoch: int) -> None:
        st = self.state
        ed = self.rd.epoch_dir(epoch)
        self._set_progress(phase="epoch_boundary", epoch=epoch)
        if "last_step" not in st.boundary_done:
            st.epoch_last_step_version = st.current_version
            st.boundary_done.append("last_step")
        pairs: Optional[list[dict[str, Any]]] = None
        if self.o.slow_update:
            if epoch == 1:
                if "slow" not in st.boundary_done:  # the empty placeholder, unscored (QUIRK-25)
                    placeholder = inject_empty_slow_update_field(self.current)
                    if placeholder != self.current:
                        st.current_version = self._new_version(placeholder)
                    st.current_origin = "slow_update_placeholder_epoch_01"
                    self.rd.write_json(f"{ed}/slow_result.json", {"action": "inject_placeholder", "epoch": 1})
            else:
                pairs = await self._pairs(epoch, ed, "slow")
                await self._slow_update(epoch, ed, pairs)
            self._done("slow")
        new_meta = ""  # what the next epoch's optimizer prompts carry (§11.1)
        if self.o.meta_skill:
            if epoch == 1:
                self.rd.write_json(f"{ed}/meta_skill_result.json", {"action": "skip_first_epoch", "epoch": 1})
            else:
                if pairs is None:
                    pairs = await self._pairs(epoch, ed, "meta")
                new_meta = await self._meta_skill(epoch, ed, pairs)
        st.meta_skill = new_meta
        self.rd.write_json("history.json", self.history)  # the whole list, as the reference's file, once an epoch
        st.epoch_start_version = st.current_version
        st.step_buffer = []
        st.boundary_done = []
        st.step = 1
        st.epoch = epoch + 1
        if epoch >= self.o.epochs:
            st.phase = "final"
        self._save()

    def _done(self, what: str) -> None:
        if what not in self.state.boundary_done:
            self.state.boundary_done.append(what)
        self._save()

    async def _pairs(self, epoch: int, ed: str, who: str) -> list[dict[str, Any]]:
        """The longitudinal comparison: last epoch's skill and the current one on the same train sample (§10.3)."""
        st, o = self.state, self.o
        prev_skill, curr_skill = (
            self.skill_text(st.epoch_start_version),
            self.skill_text(st.epoch_last_step_version if who == "meta" else st.current_version),
        )
        n = min(o.slow_update_samples, len(self.splits.train))

        async def play(tasks: list[Task], tag: str) -> list[dict[str, Any]]:
            self._set_progress(stage=f"{who}:rollout", done=0, total=2 * len(tasks))
            prev = await rollout(
                self.runner,
                tasks,
                prev_skill,
                self._ctx(f"{who}/e{epoch}/{tag}prev", False, self.cfg.seed + 2000 * epoch),
                o.max_infra_failure_fraction,
                "slow-update",
            )
            curr = await rollout(
                self.runner,
                tasks,
                curr_skill,
                self._ctx(f"{who}/e{epoch}/{tag}curr", False, self.cfg.seed + 2000 * epoch),
                o.max_infra_failure_fraction,
                "slow-update",
            )
            return build_pairs(tasks, prev, curr)

        async def do_pairs() -> list[dict[str, Any]]:
            tasks = sample_tasks(self.splits.train, self.cfg.seed, epoch, n)
            pairs = await play(tasks, "")
            kept = keep(pairs, o.slow_update_pairs)
            if o.slow_update_pairs == "changed":  # top up with further changed pairs, walking the same shuffle
                rest = [
                    t
                    for t in sample_tasks(self.splits.train, self.cfg.seed, epoch, 0)
                    if t.task_id not in {p["id"] for p in pairs}
                ]
                while len(kept) < n and rest:
                    chunk, rest = rest[: n - len(kept)], rest[n - len(kept) :]
                    kept += keep(await play(chunk, f"topup{len(kept)}/"), "changed")
                kept = kept[:n]
            return kept

        pairs = await self._memo(f"{ed}/{who}_pairs.json", f"e{epoch}:{who}_pairs", do_pairs)
        self.rd.write_json(
            f"{ed}/comparison_pairs.json",
            [{k: v for k, v in p.items() if not k.endswith("_trajectory")} for p in pairs],
        )
        return pairs

    async def _slow_update(self, epoch: int, ed: str, pairs: list[dict[str, Any]]) -> None:
        st, o = self.state, self.o
        if "slow" in st.boundary_done:
            return
        prev_skill, curr_skill = self.skill_text(st.epoch_start_version), self.current

        async def do_slow() -> dict[str, Any]:
            self._set_progress(stage="slow_update")
            user = self.guard.comparison_user(
                pairs,
                prompts.system_prompt("slow_update"),
                lambda c: prompts.slow_update_user(
                    prev_skill=prev_skill,
                    curr_skill=curr_skill,
                    prev_guidance=extract_slow_update_field(curr_skill),
                    comparison=c,
                ),
            )
            self.rd.write_text(f"{ed}/slow_update_prompt.md", user)  # what the optimizer was shown, for the record
            rec, guidance = await write_slow_update(self.llm, user, f"slow/e{epoch}/write")
            if guidance is None:
                return {**rec, "epoch": epoch}
            candidate = replace_slow_update_field(curr_skill, guidance)
            self.rd.write_text(f"{ed}/candidate_skill.md", candidate)
            rec.update(
                epoch=epoch,
                candidate_hash=skill_hash(candidate),
                update_origin="slow_update_momentum",
                prev_hard=sum(bool(p["prev"]["hard"]) for p in pairs),
                curr_hard=sum(bool(p["curr"]["hard"]) for p in pairs),
            )
            if o.slow_update_gate or o.slow_update_force_validate:
                eval_key, ev = await self.evaluate(candidate, self.splits.selection, "selection")
                cand, cur, best, n_cmp = self.compare(ev)
                rec.update(
                    eval_key=eval_key,
                    selection_hard=ev["hard"],
                    selection_soft=ev["soft"],
                    candidate_full_score=self.score_of(ev),
                    tasks_compared=n_cmp,
                )
                d = gate_stage.decide(cand, cur, best, True)
                rec["action"] = d.action if o.slow_update_gate else gate_stage.FORCE_ACCEPT
                rec["decision"] = d.to_dict()
                rec["reason"] = gate_stage.reason(rec["action"], cand, cur, best, o.gate_metric, n_cmp)
                rec["flipped"] = gate_stage.flipped(ev, self.scores[st.current_eval])
            else:  # the reference's force mode: injected with the stale score (QUIRK-1)
                rec.update(
                    action=gate_stage.FORCE_ACCEPT, eval_key=st.current_eval, candidate_full_score=st.current_score
                )
            return rec

        rec = await self._memo(f"{ed}/slow_result.json", f"e{epoch}:slow_update", do_slow)
        if gate_stage.is_accepted(rec["action"]):
            st.current_version = self._new_version(
                self.rd.root.joinpath(ed, "candidate_skill.md").read_text(encoding="utf-8")
            )
            st.current_score, st.current_eval = rec["candidate_full_score"], rec["eval_key"]
            st.current_origin = f"slow_update_epoch_{epoch:02d}"
            if rec.get("decision") and rec["decision"]["candidate_score"] > rec["decision"]["best_score"]:
                self._set_best(st.current_version, st.current_score, rec["eval_key"], st.global_step)
            self.tracker.log_artifact(self.rd.root / ed / "candidate_skill.md", f"slow_update/e{epoch:02d}")
        st.counts.dropped_epoch_calls += int("error" in rec)
        self.tracker.log_metrics(
            {"slow_update_accepted": 1.0 if gate_stage.is_accepted(rec["action"]) else 0.0}, st.global_step
        )

    async def _meta_skill(self, epoch: int, ed: str, pairs: list[dict[str, Any]]) -> str:
        st = self.state

        async def do_meta() -> dict[str, Any]:
            self._set_progress(stage="meta_skill")
            user = self.guard.comparison_user(
                pairs,
                prompts.system_prompt("meta_skill"),
                lambda c: prompts.meta_skill_user(
                    prev_skill=self.skill_text(st.epoch_start_version),
                    curr_skill=self.skill_text(st.epoch_last_step_version),
                    prev_meta=st.meta_skill,
                    comparison=c,
                ),
            )
            self.rd.write_text(f"{ed}/meta_skill_prompt.md", user)
            rec, _ = await write_meta_skill(self.llm, user, f"meta/e{epoch}")
            return {**rec, "epoch": epoch}

        rec = await self._memo(f"{ed}/meta_skill_result.json", f"e{epoch}:meta_skill", do_meta)
        content = rec.get("meta_skill_content", "") if rec["action"] == "write_meta_skill" else ""
        if "meta" not in st.boundary_done:
            st.counts.dropped_epoch_calls += int("error" in rec)
            self._done("meta")
        self.rd.write_text(f"{ed}/meta_skill.md", content)
        self.tracker.log_artifact(self.rd.root / f"{ed}/meta_skill.md", f"meta_skill/e{epoch:02d}")
        return content

    # ---------- final evaluation (§13.1) ----------
    async def final_evaluation(self) -> None:
        st = self.state
        self._set_progress(phase="final")
        final_selection: Optional[float] = st.best_score
        if skill_hash(self.current) != skill_hash(self.skill_text(st.best_version)):
            eval_key, ev = await self.evaluate(self.current, self.splits.selection, "selection")
            cand, _, best, _ = self.compare(ev)
            final_selection = self.score_of(ev)
            if cand > best:  # promote the final skill
                self._set_best(st.current_version, final_selection, eval_key, st.global_step)
                st.final_promoted = True
            self._save()
        versions = {"initial": 0, "best": st.best_version, "final": st.current_version}
        test: dict[str, Any] = {}
        for name, v in versions.items():

            async def do_test(v: int = v, name: str = name) -> dict[str, Any]:
                return (await self.evaluate(self.skill_text(v), self.splits.test, f"test:{name}"))[1]

            test[name] = await self._memo(f"final/test_{name}.json", f"final:{name}", do_test)
        await self.refresh_ledger()
        ledger = self._ledger
        actions = [h["action"] for h in self.history]
        summary = {
            "experiment": self.cfg.experiment,
            "run_dir": str(self.rd.root),
            "seed": self.cfg.seed,
            "selection": {"initial": st.initial_score, "best": st.best_score, "final": final_selection},
            "test": {
                k: {kk: v[kk] for kk in ("hard", "soft", "per_type", "n", "n_scored", "infra_errors", "data_errors")}
                for k, v in test.items()
            },
            "delta_test_hard_best_vs_initial": test["best"]["hard"] - test["initial"]["hard"],
            "delta_test_soft_best_vs_initial": test["best"]["soft"] - test["initial"]["soft"],
            "delta_test_hard_final_vs_initial": test["final"]["hard"] - test["initial"]["hard"],
            "versions": versions,
            "best_step": st.best_step,
            "current_origin": st.current_origin,
            "best_origin": st.best_origin,
            "final_promoted": st.final_promoted,
            "counts": asdict(st.counts),
            "actions": {a: actions.count(a) for a in sorted(set(actions))},
            "steps": st.global_step,
            "tokens": ledger["totals"],
            "wall_time_s": st.wall_time_s,
        }
        self.rd.write_json("history.json", self.history)
        self.rd.write_json("final/evaluation.json", test)
        self.rd.write_json("summary.json", summary)
        st.phase = "done"
        self._save()
        self.tracker.log_metrics(
            {
                "test_hard_initial": test["initial"]["hard"],
                "test_hard_best": test["best"]["hard"],
                "test_hard_final": test["final"]["hard"],
                "test_soft_initial": test["initial"]["soft"],
                "test_soft_best": test["best"]["soft"],
                "test_soft_final": test["final"]["soft"],
                "best_selection_score": st.best_score,
                "tokens_total": ledger["totals"]["tokens"],
                "cost_usd_total": ledger["totals"]["cost_usd"],
            },
            st.global_step,
        )
        for f in ("summary.json", "best_skill.md", "history.json", "ledger.json", "final/evaluation.json"):
            p = self.rd.root / f
            if p.exists():
                self.tracker.log_artifact(p)
