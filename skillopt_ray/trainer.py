"""The training loop. Reads like single-process code; the stages and actors do the work.

Every stage of every step writes its record to the run directory before the next
starts, and the run state is committed after each gate. A rerun loads finished
stage records instead of recomputing them, and the LLM cache answers any call a
half-finished stage already paid for — so a resumed run ends exactly where an
uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

from envs.base import EpisodeContext, EpisodeResult, Task
from skillopt_ray.config import Config
from skillopt_ray.epoch.meta_skill import write_meta_skill
from skillopt_ray.epoch.slow_update import pair_categories, write_slow_update
from skillopt_ray.prompts import context_block
from skillopt_ray.rundir import RunDir
from skillopt_ray.llm.types import MalformedOutput
from skillopt_ray.skill.document import skill_hash
from skillopt_ray.skill.edits import Edit
from skillopt_ray.stages import gate as gate_stage
from skillopt_ray.stages.aggregate import AggregateOutput, aggregate
from skillopt_ray.stages.reflect import ReflectOutput, reflect
from skillopt_ray.stages.rollout import rollout, summarize
from skillopt_ray.stages.select import SelectOutput, edit_budget, select
from skillopt_ray.stages.update import UpdateOutput, add_lapse_notes, update
from skillopt_ray.tracking import Tracker

STATE_VERSION = 1


class SimulatedInterrupt(RuntimeError):
    """Raised by debug.interrupt_after to test resume at an exact point."""


@dataclass
class Splits:
    train: list[Task]
    selection: list[Task]
    test: list[Task]


def _rng(*parts: Any) -> random.Random:
    seed = int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16], 16)
    return random.Random(seed)


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


def _results(data: list[dict[str, Any]]) -> list[EpisodeResult]:
    return [EpisodeResult.from_dict(d) for d in data]


class Trainer:
    def __init__(self, cfg: Config, rundir: RunDir, llm: Any, runner: Any, tracker: Tracker, splits: Splits, seed_skill: str,
                 on_progress: Optional[Callable[[dict[str, Any]], None]] = None):
        self.cfg = cfg
        self.o = cfg.optimizer
        self.rd = rundir
        self.llm = llm
        self.runner = runner
        self.tracker = tracker
        self.splits = splits
        self.seed_skill = seed_skill
        self._on_progress = on_progress
        self.state: dict[str, Any] = {}
        self._ledger: dict[str, Any] = {}  # last ledger snapshot from the gateway
        self._t0 = time.monotonic()

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

    def _ctx(self, key: str, training: bool) -> EpisodeContext:
        return EpisodeContext(key=key, training=training, max_turns=self.cfg.env.max_turns, history_window=self.cfg.env.history_window)

    def score_of(self, hard: float, soft: float) -> float:
        return gate_stage.gate_score(hard, soft, self.o.gate_metric, self.o.mixed_weight)

    def _split_sig(self, tasks: list[Task]) -> str:
        blob = "|".join(t.task_id for t in tasks) + f"|{self.cfg.env.max_turns}|{self.cfg.env.history_window}"
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    async def evaluate(self, skill: str, tasks: list[Task], what: str) -> dict[str, Any]:
        """Score a skill on a split; cached by skill content hash and split signature (never stale)."""
        key = f"{skill_hash(skill)}|{self._split_sig(tasks)}"
        cache = self.state.setdefault("score_cache", {})
        if key in cache:
            return cache[key]
        self._set_progress(stage=f"validate:{what}", done=0, total=len(tasks))
        res = await rollout(self.runner, tasks, skill, self._ctx(f"eval/{skill_hash(skill)}", False),
                            self.o.max_infra_failure_fraction, what)
        stats = summarize(res)
        entry = {"hard": stats.hard, "soft": stats.soft, "per_type": stats.per_type, "infra_errors": stats.infra_errors, "data_errors": stats.data_errors, "n": stats.n}
        cache[key] = entry
        return entry

    def _total_steps(self) -> int:
        return self.o.epochs * self.steps_per_epoch()

    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(len(self.splits.train) / self.o.batch_size))

    def _batch(self, epoch: int, step: int) -> list[Task]:
        order = list(self.splits.train)
        _rng(self.cfg.seed, "epoch", epoch).shuffle(order)
        b = self.o.batch_size
        return order[(step - 1) * b : step * b]

    def _new_version(self, text: str) -> int:
        v = self.state["next_version"]
        self.rd.write_skill(v, text)
        self.state["next_version"] = v + 1
        self.tracker.log_artifact(self.rd.skill_path(v), "skills")
        return v

    def _save(self) -> None:
        self.state["wall_time_s"] = self.state.get("wall_time_s_prior", 0.0) + (time.monotonic() - self._t0)
        self.rd.save_state(self.state)

    # ---------- run ----------
    async def init_state(self) -> None:
        st = self.rd.load_state()
        if st is not None:
            if st.get("version") != STATE_VERSION:
                raise RuntimeError(f"run state version {st.get('version')} is not supported; start a new run (resume=false)")
            st["wall_time_s_prior"] = st.get("wall_time_s", 0.0)
            self.state = st
            return
        self.state = {
            "version": STATE_VERSION, "phase": "train", "epoch": 1, "step": 1, "global_step": 0,
            "current_version": 0, "best_version": 0, "next_version": 1, "epoch_start_version": 0,
            "current_score": None, "best_score": None, "initial_score": None,
            "counts": {"accept": 0, "reject": 0, "skip": 0, "dropped_minibatches": 0, "merge_fallbacks": 0, "rank_fallbacks": 0},
            "step_buffer": [], "meta_skill": "", "history": [], "epoch_history": [], "score_cache": {}, "wall_time_s_prior": 0.0,
        }
        self.rd.write_skill(0, self.seed_skill)
        self.tracker.log_artifact(self.rd.skill_path(0), "skills")
        self._save()

    async def run(self) -> dict[str, Any]:
        await self.init_state()
        st = self.state
        if st["initial_score"] is None:
            base = await self.evaluate(self.skill_text(0), self.splits.selection, "selection")
            s = self.score_of(base["hard"], base["soft"])
            st.update(initial_score=s, current_score=s, best_score=s)
            self.rd.write_text("best_skill.md", self.skill_text(0))
            self._save()
            self.tracker.log_metrics({"selection_score": s}, 0)
        while st["phase"] == "train":
            if st["step"] <= self.steps_per_epoch():
                await self.train_step(st["epoch"], st["step"])
            else:
                await self.epoch_boundary(st["epoch"])
        if st["phase"] == "final":
            await self.final_evaluation()
        return self.rd.summary() or {}

    async def train_step(self, epoch: int, step: int) -> None:
        st = self.state
        sd = self.rd.step_dir(epoch, step)
        label = f"e{epoch}s{step}"
        key = f"train/{label}"
        skill = self.skill_text(st["current_version"])
        tasks = self._batch(epoch, step)
        self._set_progress(phase="train", epoch=epoch, step=step, global_step=st["global_step"] + 1, total_steps=self._total_steps())

        async def do_rollout() -> list[dict[str, Any]]:
            self._set_progress(stage="rollout", done=0, total=len(tasks))
            res = await rollout(self.runner, tasks, skill, self._ctx(key, True), self.o.max_infra_failure_fraction, "training")
            return [r.to_dict() for r in res]

        results = _results(await self._memo(f"{sd}/rollout.json", f"{label}:rollout", do_rollout))
        stats = summarize(results)
        budget = edit_budget(self.o.lr_schedule, st["global_step"], self._total_steps(), self.o.learning_rate, self.o.min_learning_rate)
        ctx_text = context_block(skill, budget, st["step_buffer"], st["meta_skill"])

        async def do_reflect() -> dict[str, Any]:
            self._set_progress(stage="reflect")
            out = await reflect(self.llm, results, mode=self.o.update_mode, skill_aware=self.o.skill_aware_reflection,
                                minibatch_size=self.o.minibatch_size, rng=_rng(self.cfg.seed, epoch, step, "reflect"),
                                context=ctx_text, key=key)
            return out.to_dict()

        refl = ReflectOutput.from_dict(await self._memo(f"{sd}/reflect.json", f"{label}:reflect", do_reflect))

        async def do_aggregate() -> dict[str, Any]:
            self._set_progress(stage="aggregate")
            out = await aggregate(self.llm, refl.patches, mode=self.o.update_mode, merge_batch_size=self.o.merge_batch_size, key=key)
            return out.to_dict()

        agg = AggregateOutput.from_dict(await self._memo(f"{sd}/aggregate.json", f"{label}:aggregate", do_aggregate))

        async def do_select() -> dict[str, Any]:
            self._set_progress(stage="select")
            autonomous = self.o.lr_schedule == "autonomous"
            b = max(1, len(agg.edits)) if autonomous else budget
            out = await select(self.llm, skill, agg.edits, budget=b, autonomous=autonomous, key=key)
            return out.to_dict()

        sel = SelectOutput.from_dict(await self._memo(f"{sd}/select.json", f"{label}:select", do_select))

        async def do_update() -> dict[str, Any]:
            self._set_progress(stage="update")
            out = await update(self.llm, skill, mode=self.o.update_mode, edits=sel.selected, suggestions=agg.suggestions,
                               candidate=agg.candidate, key=key)
            if self.o.skill_aware_reflection:
                lapses = [n for p in refl.patches for n in p.lapses]
                if lapses:
                    out.candidate = await add_lapse_notes(self.llm, out.candidate, lapses, self.o.appendix_max_notes, key)
            self.rd.write_text(f"{sd}/candidate.md", out.candidate)
            return out.to_dict()

        upd = UpdateOutput.from_dict(await self._memo(f"{sd}/update.json", f"{label}:update", do_update))

        async def do_gate() -> dict[str, Any]:
            self._set_progress(stage="gate")
            if upd.candidate == skill:
                return {"action": gate_stage.SKIP, "candidate_score": st["current_score"], "current_score": st["current_score"],
                        "best_score": st["best_score"], "hard": None, "soft": None}
            ev = await self.evaluate(upd.candidate, self.splits.selection, "selection")
            cand = self.score_of(ev["hard"], ev["soft"])
            d = gate_stage.decide(cand, st["current_score"], st["best_score"], self.o.use_gate)
            return {**d.to_dict(), "hard": ev["hard"], "soft": ev["soft"]}

        gate = await self._memo(f"{sd}/gate.json", f"{label}:gate", do_gate)
        await self.refresh_ledger()  # per-step token/cost metrics, and ledger.json current for budget resumes
        self._commit_step(epoch, step, stats, agg, sel, upd, refl, gate)

    def _commit_step(self, epoch: int, step: int, stats: Any, agg: AggregateOutput, sel: SelectOutput, upd: UpdateOutput,
                     refl: ReflectOutput, gate: dict[str, Any]) -> None:
        st = self.state
        action = gate["action"]
        accepted = gate_stage.is_accepted(action)
        sd = self.rd.step_dir(epoch, step)
        if action != gate_stage.SKIP:
            self.tracker.log_artifact(self.rd.root / sd / "candidate.md", f"candidates/{sd.split('/', 1)[1]}")
        if accepted:
            v = self._new_version(upd.candidate)
            st["current_version"] = v
            st["current_score"] = gate["candidate_score"]
            if gate["candidate_score"] > st["best_score"]:
                st["best_score"] = gate["candidate_score"]
                st["best_version"] = v
                self.rd.write_text("best_skill.md", upd.candidate)
                self.tracker.log_artifact(self.rd.root / "best_skill.md")
            st["counts"]["accept"] += 1
        elif action == gate_stage.SKIP:
            st["counts"]["skip"] += 1
        else:
            st["counts"]["reject"] += 1
        st["counts"]["dropped_minibatches"] += refl.dropped
        st["counts"]["merge_fallbacks"] += len(agg.fallbacks)
        st["counts"]["rank_fallbacks"] += int(bool(sel.fallback))
        buf_entry = {"epoch": epoch, "step": step, "failure_patterns": [p.summary for p in refl.patches if p.source == "failure" and p.summary],
                     "rejected_edits": []}
        if action == gate_stage.REJECT:
            buf_entry["rejected_edits"] = [{"edit": e.to_dict(), "score": gate["candidate_score"]} for e in sel.selected]
        st["step_buffer"].append(buf_entry)
        st["global_step"] += 1
        record = {
            "global_step": st["global_step"], "epoch": epoch, "step": step, "action": action,
            "rollout_hard": stats.hard, "rollout_soft": stats.soft, "infra_errors": stats.infra_errors, "data_errors": stats.data_errors,
            "candidate_score": gate["candidate_score"], "current_score": st["current_score"], "best_score": st["best_score"],
            "budget": sel.budget, "n_patches": len(refl.patches), "n_merged": len(agg.edits), "n_selected": len(sel.selected),
            "n_applied": upd.n_applied, "skill_chars": len(self.skill_text(st["current_version"])), "skill_version": st["current_version"],
        }
        st["history"].append(record)
        st["epoch_history"].append(record)
        st["step"] = step + 1
        self._save()
        self.rd.write_json("history.json", st["history"])
        metrics = {k: v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("epoch", "step", "global_step")}
        metrics["accepted"] = 1.0 if accepted else 0.0
        metrics["wall_time_s"] = st["wall_time_s"]
        self._log_ledger_metrics(metrics)
        self.tracker.log_metrics(metrics, st["global_step"])
        self._set_progress(accept=st["counts"]["accept"], reject=st["counts"]["reject"], skip=st["counts"]["skip"])

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

    async def epoch_boundary(self, epoch: int) -> None:
        st = self.state
        ed = self.rd.epoch_dir(epoch)
        label = f"e{epoch}"
        self._set_progress(phase="epoch_boundary", epoch=epoch)
        if self.o.slow_update and epoch >= 2:
            await self._slow_update(epoch, ed, label)
        if self.o.meta_skill and epoch < self.o.epochs:
            async def do_meta() -> dict[str, Any]:
                self._set_progress(stage="meta_skill")
                try:
                    text = await write_meta_skill(self.llm, st["meta_skill"], st["epoch_history"], f"meta/{label}")
                except MalformedOutput as e:  # keep the previous meta skill; nothing unparseable is used
                    return {"meta_skill": st["meta_skill"], "dropped": e.message}
                return {"meta_skill": text}

            meta = await self._memo(f"{ed}/meta_skill.json", f"{label}:meta_skill", do_meta)
            st["meta_skill"] = meta["meta_skill"]
            st["counts"]["dropped_epoch_calls"] = st["counts"].get("dropped_epoch_calls", 0) + int("dropped" in meta)
            self.rd.write_text(f"{ed}/meta_skill.md", meta["meta_skill"])
            self.tracker.log_artifact(self.rd.root / f"{ed}/meta_skill.md", f"meta_skill/e{epoch:02d}")
        st["epoch_start_version"] = st["current_version"]
        st["step_buffer"] = []
        st["epoch_history"] = []
        st["step"] = 1
        st["epoch"] = epoch + 1
        if epoch >= self.o.epochs:
            st["phase"] = "final"
        self._save()

    async def _slow_update(self, epoch: int, ed: str, label: str) -> None:
        st = self.state
        n = min(self.o.slow_update_samples, len(self.splits.train))
        sample = sorted(_rng(self.cfg.seed, "slow", epoch).sample(range(len(self.splits.train)), n))
        tasks = [self.splits.train[i] for i in sample]
        prev_skill = self.skill_text(st["epoch_start_version"])
        cur_skill = self.skill_text(st["current_version"])

        async def do_pairs() -> dict[str, Any]:
            self._set_progress(stage="slow_update:rollout", done=0, total=2 * len(tasks))
            prev = await rollout(self.runner, tasks, prev_skill, self._ctx(f"slow/{label}/prev", True), self.o.max_infra_failure_fraction, "slow-update")
            cur = await rollout(self.runner, tasks, cur_skill, self._ctx(f"slow/{label}/cur", True), self.o.max_infra_failure_fraction, "slow-update")
            return {"prev": [r.to_dict() for r in prev], "cur": [r.to_dict() for r in cur]}

        pr = await self._memo(f"{ed}/slow_pairs.json", f"{label}:slow_pairs", do_pairs)
        pairs = pair_categories(_results(pr["prev"]), _results(pr["cur"]), self.o.slow_update_pairs)

        async def do_slow() -> dict[str, Any]:
            self._set_progress(stage="slow_update")
            try:
                candidate, guidance = await write_slow_update(self.llm, cur_skill, pairs, f"slow/{label}/write")
            except MalformedOutput as e:  # no slow update this epoch; recorded, never applied
                self.rd.write_text(f"{ed}/slow_update_candidate.md", cur_skill)
                return {"guidance": "", "pairs": {k: len(v) for k, v in pairs.items()}, "dropped": e.message,
                        "decision": gate_stage.GateDecision(gate_stage.SKIP, st["current_score"], st["current_score"], st["best_score"]).to_dict()}
            if self.o.slow_update_gate:
                ev = await self.evaluate(candidate, self.splits.selection, "selection")
                score = self.score_of(ev["hard"], ev["soft"])
                d = gate_stage.decide(score, st["current_score"], st["best_score"], True)
            else:
                d = gate_stage.decide(float("nan"), st["current_score"], st["best_score"], False)
            self.rd.write_text(f"{ed}/slow_update_candidate.md", candidate)
            return {"guidance": guidance, "pairs": {k: len(v) for k, v in pairs.items()}, "decision": d.to_dict(), "candidate_hash": skill_hash(candidate)}

        rec = await self._memo(f"{ed}/slow_update.json", f"{label}:slow_update", do_slow)
        candidate = (self.rd.root / f"{ed}/slow_update_candidate.md").read_text(encoding="utf-8")
        if gate_stage.is_accepted(rec["decision"]["action"]) and not st.get(f"slow_applied_{epoch}"):
            v = self._new_version(candidate)
            st["current_version"] = v
            score = rec["decision"]["candidate_score"]
            if rec["decision"]["action"] == gate_stage.FORCE_ACCEPT:
                ev = await self.evaluate(candidate, self.splits.selection, "selection")  # force-injected, still validated
                score = self.score_of(ev["hard"], ev["soft"])
            st["current_score"] = score
            if score > st["best_score"]:
                st["best_score"], st["best_version"] = score, v
                self.rd.write_text("best_skill.md", candidate)
            st[f"slow_applied_{epoch}"] = True
        self.tracker.log_artifact(self.rd.root / f"{ed}/slow_update_candidate.md", f"slow_update/e{epoch:02d}")
        self.tracker.log_metrics({"slow_update_accepted": 1.0 if st.get(f"slow_applied_{epoch}") else 0.0}, st["global_step"])

    async def final_evaluation(self) -> None:
        st = self.state
        self._set_progress(phase="final")
        if st["current_version"] != st["best_version"]:
            ev = await self.evaluate(self.skill_text(st["current_version"]), self.splits.selection, "selection")
            final_sel = self.score_of(ev["hard"], ev["soft"])
            if final_sel > st["best_score"]:
                st["best_score"], st["best_version"] = final_sel, st["current_version"]
                self.rd.write_text("best_skill.md", self.skill_text(st["current_version"]))
                st["final_promoted"] = True
            self._save()
        versions = {"initial": 0, "best": st["best_version"], "final": st["current_version"]}
        test: dict[str, Any] = {}
        for name, v in versions.items():
            async def do_test(v: int = v, name: str = name) -> dict[str, Any]:
                return await self.evaluate(self.skill_text(v), self.splits.test, f"test:{name}")

            test[name] = await self._memo(f"final/test_{name}.json", f"final:{name}", do_test)
        await self.refresh_ledger()
        ledger = self._ledger
        summary = {
            "experiment": self.cfg.experiment,
            "run_dir": str(self.rd.root),
            "seed": self.cfg.seed,
            "selection": {"initial": st["initial_score"], "best": st["best_score"], "final": st["current_score"]},
            "test": {k: {"hard": v["hard"], "soft": v["soft"], "per_type": v["per_type"], "n": v["n"], "infra_errors": v["infra_errors"], "data_errors": v.get("data_errors", 0)}
                     for k, v in test.items()},
            "delta_test_hard_best_vs_initial": test["best"]["hard"] - test["initial"]["hard"],
            "delta_test_soft_best_vs_initial": test["best"]["soft"] - test["initial"]["soft"],
            "versions": versions,
            "final_promoted": bool(st.get("final_promoted")),
            "counts": st["counts"],
            "steps": st["global_step"],
            "tokens": ledger["totals"],
            "wall_time_s": st.get("wall_time_s", 0.0),
        }
        self.rd.write_json("final/evaluation.json", test)
        self.rd.write_json("summary.json", summary)
        st["phase"] = "done"
        self._save()
        self.tracker.log_metrics({
            "test_hard_initial": test["initial"]["hard"], "test_hard_best": test["best"]["hard"], "test_hard_final": test["final"]["hard"],
            "test_soft_initial": test["initial"]["soft"], "test_soft_best": test["best"]["soft"], "test_soft_final": test["final"]["soft"],
            "best_selection_score": st["best_score"], "tokens_total": ledger["totals"]["tokens"], "cost_usd_total": ledger["totals"]["cost_usd"],
        }, st["global_step"])
        for f in ("summary.json", "best_skill.md", "history.json", "ledger.json", "final/evaluation.json"):
            p = self.rd.root / f
            if p.exists():
                self.tracker.log_artifact(p)
