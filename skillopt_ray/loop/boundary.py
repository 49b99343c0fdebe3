"""The epoch boundary: the longitudinal comparison pairs (last epoch's skill against the current one on the same
train sample), the slow update (target-facing guidance, optionally gated) and the meta skill (optimizer-facing
memory for the next epoch). Each part is applied once: `state.boundary_done` makes a resumed boundary idempotent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from skillopt_envs.base import Task

from skillopt_ray import prompts
from skillopt_ray.epoch.meta_skill import write_meta_skill
from skillopt_ray.epoch.slow_update import build_pairs, keep, sample_tasks, write_slow_update
from skillopt_ray.loop.evaluation import Evaluator
from skillopt_ray.loop.recorder import Recorder
from skillopt_ray.loop.schedule import Schedule, Stage
from skillopt_ray.prompts.render import EpochPair
from skillopt_ray.runs.records import FORCE_ACCEPT, MetaSkillRecord, SlowUpdateRecord
from skillopt_ray.runs.rundir import META_RESULT, META_SKILL, SLOW_RESULT, RunDir
from skillopt_ray.skill.document import (
    extract_slow_update_field,
    inject_empty_slow_update_field,
    replace_slow_update_field,
    skill_hash,
)
from skillopt_ray.stages.gate import flipped

Pairs = list[EpochPair]


class EpochBoundary:
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

    async def run(self, epoch: int) -> None:
        st, o = self.rec.state, self.o
        self.progress(phase="epoch_boundary", epoch=epoch)
        if "last_step" not in st.boundary_done:
            st.epoch_last_step_version = st.current_version
            st.boundary_done.append("last_step")
        pairs: Optional[Pairs] = None
        if o.slow_update:
            if epoch == 1:
                self._placeholder(epoch)
            else:
                pairs = await self._pairs(epoch, "slow")
                await self._slow_update(epoch, pairs)
            self._done("slow")
        new_meta = ""  # what the next epoch's optimizer prompts carry
        if o.meta_skill:
            if epoch == 1:
                self.rec.rd.write_meta_skill(1, MetaSkillRecord(action="skip_first_epoch", epoch=1))
            else:
                new_meta = await self._meta_skill(
                    epoch, pairs if pairs is not None else await self._pairs(epoch, "meta")
                )
        st.meta_skill = new_meta
        self.rec.write_history()  # the whole list, as the reference's file, once an epoch
        st.epoch_start_version = st.current_version
        st.step_buffer = []
        st.boundary_done = []
        st.step = 1
        st.epoch = epoch + 1
        if epoch >= o.epochs:
            st.phase = "final"
        self.rec.save()

    def _done(self, what: str) -> None:
        if what not in self.rec.state.boundary_done:
            self.rec.state.boundary_done.append(what)
        self.rec.save()

    def _placeholder(self, epoch: int) -> None:
        """Epoch 1: the empty slow-update block goes in, unscored."""
        st = self.rec.state
        if "slow" in st.boundary_done:
            return
        placeholder = inject_empty_slow_update_field(self.rec.current)
        if placeholder != self.rec.current:
            st.current_version = self.rec.new_version(placeholder)
        st.current_origin = "slow_update_placeholder_epoch_01"
        self.rec.rd.write_slow_update(epoch, SlowUpdateRecord(action="inject_placeholder", epoch=1))

    # ---------------------------------------------------------------- pairs
    async def _play_pairs(self, epoch: int, who: str, tasks: list[Task], tag: str) -> Pairs:
        st = self.rec.state
        prev_skill = self.rec.skill_text(st.epoch_start_version)
        curr_skill = self.rec.skill_text(st.epoch_last_step_version if who == "meta" else st.current_version)
        self.progress(stage=Stage.pairs(who), done=0, total=2 * len(tasks))
        seed = self.cfg.seed + 2000 * epoch  # the epoch sample's seed (the reference's build_train_batch)
        prev = await self.ev.play(tasks, prev_skill, f"{who}/e{epoch}/{tag}prev", "slow-update", seed=seed)
        curr = await self.ev.play(tasks, curr_skill, f"{who}/e{epoch}/{tag}curr", "slow-update", seed=seed)
        return build_pairs(tasks, prev, curr)

    async def _pairs(self, epoch: int, who: str) -> Pairs:
        """The longitudinal comparison: last epoch's skill and the current one on the same train sample."""
        o, train, seed = self.o, self.schedule.splits.train, self.cfg.seed
        n = self.schedule.boundary_samples()

        async def do_pairs() -> Pairs:
            pairs = await self._play_pairs(epoch, who, sample_tasks(train, seed, epoch, n), "")
            kept = keep(pairs, o.slow_update_pairs)
            if o.slow_update_pairs == "changed":  # top up with further changed pairs, walking the same shuffle
                seen = {p["id"] for p in pairs}
                rest = [t for t in sample_tasks(train, seed, epoch, 0) if t.task_id not in seen]
                while len(kept) < n and rest:
                    chunk, rest = rest[: n - len(kept)], rest[n - len(kept) :]
                    kept += keep(await self._play_pairs(epoch, who, chunk, f"topup{len(kept)}/"), "changed")
                kept = kept[:n]
            return kept

        ed = RunDir.epoch_dir(epoch)
        pairs = await self.rec.memo(f"{ed}/{who}_pairs.json", f"e{epoch}:{who}_pairs", do_pairs)
        self.rec.rd.write_json(
            f"{ed}/comparison_pairs.json",
            [{k: v for k, v in p.items() if not k.endswith("_trajectory")} for p in pairs],
        )
        return pairs

    # ---------------------------------------------------------------- slow update
    async def _slow_update(self, epoch: int, pairs: Pairs) -> None:
        st, rd = self.rec.state, self.rec.rd
        if "slow" in st.boundary_done:
            return

        async def do_slow() -> SlowUpdateRecord:
            return await self._write_slow(epoch, pairs)

        slow_rel = f"{RunDir.epoch_dir(epoch)}/{SLOW_RESULT}"
        rec = await self.rec.record(slow_rel, f"e{epoch}:slow_update", SlowUpdateRecord.from_dict, do_slow)
        if rec.accepted:
            st.current_version = self.rec.new_version(rd.read_epoch_text(epoch, "candidate_skill.md") or "")
            st.current_score, st.current_eval = rec.candidate_full_score, rec.eval_key or ""
            st.current_origin = f"slow_update_epoch_{epoch:02d}"
            if rec.new_best:
                self.rec.set_best(st.current_version, st.current_score, rec.eval_key, st.global_step)
            self.rec.log_artifact(f"{RunDir.epoch_dir(epoch)}/candidate_skill.md", f"slow_update/e{epoch:02d}")
        st.counts.dropped_epoch_calls += int(rec.error is not None)
        self.rec.log_metrics({"slow_update_accepted": 1.0 if rec.accepted else 0.0})

    async def _write_slow(self, epoch: int, pairs: Pairs) -> SlowUpdateRecord:
        """One optimizer call writes the guidance; the candidate carrying it is gated (or forced) on selection."""
        st, rd = self.rec.state, self.rec.rd
        prev_skill, curr_skill = self.rec.skill_text(st.epoch_start_version), self.rec.current
        self.progress(stage=Stage.SLOW_UPDATE)
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
        rd.write_epoch_text(epoch, "slow_update_prompt.md", user)  # what the optimizer was shown, for the record
        raw, guidance = await write_slow_update(self.llm, user, f"slow/e{epoch}/write")
        rec = SlowUpdateRecord.from_dict({"action": "", **raw, "epoch": epoch})  # the action is decided below
        if guidance is None:
            return rec
        candidate = replace_slow_update_field(curr_skill, guidance)
        rd.write_epoch_text(epoch, "candidate_skill.md", candidate)
        rec.candidate_hash, rec.update_origin = skill_hash(candidate), "slow_update_momentum"
        rec.prev_hard = sum(bool(p["prev"]["hard"]) for p in pairs)
        rec.curr_hard = sum(bool(p["curr"]["hard"]) for p in pairs)
        if self.o.slow_update_gate or self.o.slow_update_force_validate:
            await self._gate_slow(rec, candidate)
        else:  # the reference's force mode: injected with the stale score
            rec.action, rec.eval_key, rec.candidate_full_score = FORCE_ACCEPT, st.current_eval, st.current_score
        return rec

    async def _gate_slow(self, rec: SlowUpdateRecord, candidate: str) -> None:
        st, ev, policy = self.rec.state, self.ev, self.ev.policy
        selection = self.schedule.splits.selection
        eval_key, e = await ev.evaluate(candidate, selection, "selection")
        cand, cur, best, n = ev.compare(e, st, len(selection))
        rec.eval_key, rec.selection_hard, rec.selection_soft = eval_key, e.hard, e.soft
        rec.candidate_full_score, rec.tasks_compared = policy.score(e), n
        d, test = policy.judge(e, ev.scores[st.current_eval], (cand, cur, best), use_gate=True)
        rec.action = d.action if self.o.slow_update_gate else FORCE_ACCEPT
        rec.decision = d.to_dict()
        rec.reason = policy.reason(rec.action, cand, cur, best, n, test if self.o.slow_update_gate else None)
        rec.flipped = flipped(e, ev.scores[st.current_eval], ev.repeats)
        rec.gate_test = test.to_dict() if test and self.o.slow_update_gate else None

    # ---------------------------------------------------------------- meta skill
    async def _meta_skill(self, epoch: int, pairs: Pairs) -> str:
        st, rd = self.rec.state, self.rec.rd

        async def do_meta() -> MetaSkillRecord:
            self.progress(stage=Stage.META_SKILL)
            user = self.guard.comparison_user(
                pairs,
                prompts.system_prompt("meta_skill"),
                lambda c: prompts.meta_skill_user(
                    prev_skill=self.rec.skill_text(st.epoch_start_version),
                    curr_skill=self.rec.skill_text(st.epoch_last_step_version),
                    prev_meta=st.meta_skill,
                    comparison=c,
                ),
            )
            rd.write_epoch_text(epoch, "meta_skill_prompt.md", user)
            raw, _ = await write_meta_skill(self.llm, user, f"meta/e{epoch}")
            return MetaSkillRecord.from_dict({**raw, "epoch": epoch})

        meta_rel = f"{RunDir.epoch_dir(epoch)}/{META_RESULT}"
        rec = await self.rec.record(meta_rel, f"e{epoch}:meta_skill", MetaSkillRecord.from_dict, do_meta)
        if "meta" not in st.boundary_done:
            st.counts.dropped_epoch_calls += int(rec.error is not None)
            self._done("meta")
        rd.write_epoch_text(epoch, META_SKILL, rec.content)
        self.rec.log_artifact(f"{RunDir.epoch_dir(epoch)}/{META_SKILL}", f"meta_skill/e{epoch:02d}")
        return rec.content
