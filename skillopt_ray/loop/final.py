"""The end of a run: the final skill's selection score (promoted to best when it beats it), the initial, best and
final skills on the test split, and the run's summary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Optional

from skillopt_ray.loop.evaluation import Evaluator
from skillopt_ray.loop.recorder import Recorder
from skillopt_ray.loop.schedule import Schedule
from skillopt_ray.runs.records import Evaluation, Summary
from skillopt_ray.runs.rundir import BEST_SKILL, FINAL_EVALUATION, HISTORY_LIST, LEDGER, SUMMARY
from skillopt_ray.skill.document import skill_hash


class FinalEvaluation:
    def __init__(
        self, cfg: Any, llm: Any, recorder: Recorder, evaluator: Evaluator, schedule: Schedule, progress: Callable
    ):
        self.cfg, self.llm = cfg, llm
        self.rec, self.ev, self.schedule = recorder, evaluator, schedule
        self.progress = progress

    async def run(self) -> None:
        st, rec = self.rec.state, self.rec
        self.progress(phase="final")
        final_selection = await self._final_selection()
        versions = {"initial": 0, "best": st.best_version, "final": st.current_version}
        test: dict[str, Evaluation] = {}
        for name, v in versions.items():

            async def do_test(v: int = v, name: str = name) -> Evaluation:
                return (await self.ev.evaluate(rec.skill_text(v), self.schedule.splits.test, f"test:{name}"))[1]

            test[name] = await rec.record(f"final/test_{name}.json", f"final:{name}", Evaluation.from_dict, do_test)
        rec.ledger = await self.llm.save_ledger()
        summary = self._summary(final_selection, versions, test)
        rec.write_history()
        rec.rd.write_final_evaluation(test)
        rec.rd.write_summary(summary)
        st.phase = "done"
        rec.save()
        self._log(test)

    async def _final_selection(self) -> Optional[float]:
        """The final skill on selection when it differs from the best; promoted to best when it scores above."""
        st, rec = self.rec.state, self.rec
        if skill_hash(rec.current) == skill_hash(rec.skill_text(st.best_version)):
            return st.best_score
        selection = self.schedule.splits.selection
        eval_key, ev = await self.ev.evaluate(rec.current, selection, "selection")
        cand, _, best, _ = self.ev.compare(ev, st, len(selection))
        final_selection = self.ev.policy.score(ev)
        if cand > best:  # promote the final skill
            rec.set_best(st.current_version, final_selection, eval_key, st.global_step)
            st.final_promoted = True
        rec.save()
        return final_selection

    def _summary(
        self, final_selection: Optional[float], versions: dict[str, int], test: dict[str, Evaluation]
    ) -> Summary:
        st, cfg = self.rec.state, self.cfg
        actions = [h.action for h in self.rec.history]
        return Summary(
            experiment=cfg.experiment,
            run_dir=str(self.rec.rd.root),
            seed=cfg.seed,
            selection={"initial": st.initial_score, "best": st.best_score, "final": final_selection},
            test={k: v.brief() for k, v in test.items()},
            delta_test_hard_best_vs_initial=test["best"].hard - test["initial"].hard,
            delta_test_soft_best_vs_initial=test["best"].soft - test["initial"].soft,
            delta_test_hard_final_vs_initial=test["final"].hard - test["initial"].hard,
            versions=versions,
            best_step=st.best_step,
            current_origin=st.current_origin,
            best_origin=st.best_origin,
            final_promoted=st.final_promoted,
            counts=asdict(st.counts),
            actions={a: actions.count(a) for a in sorted(set(actions))},
            steps=st.global_step,
            tokens=self.rec.ledger["totals"],
            wall_time_s=st.wall_time_s,
            intervals=self._intervals(test),
            rollouts_per_task=self.ev.repeats if self.ev.repeats > 1 else None,
        )

    def _intervals(self, test: dict[str, Evaluation]) -> dict[str, dict[str, Any]]:
        """95% intervals with n: each selection score over the selection tasks (the gate metric), each test
        score over the test tasks (hard and soft); a task's value is the mean of its repeats."""
        st, rec, ev = self.rec.state, self.rec, self.ev
        selection = self.schedule.splits.selection
        keys = {
            "initial": ev.key_for(rec.skill_text(0), selection),
            "best": st.best_eval,
            "final": ev.key_for(rec.current, selection),
        }
        sel = {k: ev.policy.interval(ev.scores[key]).to_dict() for k, key in keys.items() if key in ev.scores}
        tst = {k: {m: e.interval(m).to_dict() for m in ("hard", "soft")} for k, e in test.items()}
        return {"selection": sel, "test": tst}

    def _log(self, test: dict[str, Evaluation]) -> None:
        totals = self.rec.ledger["totals"]
        metrics = {f"test_{m}_{k}": getattr(test[k], m) for m in ("hard", "soft") for k in ("initial", "best", "final")}
        for k, e in test.items():  # the test scores' 95% intervals over the test tasks
            iv = e.interval("hard")
            metrics.update({f"test_hard_{k}_ci_lo": iv.lo, f"test_hard_{k}_ci_hi": iv.hi})
        metrics["test_n_tasks"] = float(len(test["best"].tasks))
        best = self.ev.scores.get(self.rec.state.best_eval)
        if best is not None:  # the best selection score's interval over the selection tasks
            iv = self.ev.policy.interval(best)
            metrics.update(best_selection_ci_lo=iv.lo, best_selection_ci_hi=iv.hi, selection_n_tasks=float(iv.n))
        metrics.update(
            best_selection_score=self.rec.state.best_score,
            tokens_total=totals["tokens"],
            cost_usd_total=totals["cost_usd"],
        )
        self.rec.log_metrics(metrics)
        for f in (SUMMARY, BEST_SKILL, HISTORY_LIST, LEDGER, FINAL_EVALUATION):
            if self.rec.rd.exists(f):
                self.rec.log_artifact(f)
