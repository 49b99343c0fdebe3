"""Evaluation: a skill scored on a split, cached by skill content and split signature (the score cache); the
gate's comparisons of a candidate with the current and best skills; the gate's early stop.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Callable
from typing import Any, Optional, cast

from skillopt_envs.base import EpisodeContext, EpisodeResult, Task

from skillopt_ray.base.stats import SequentialSamples
from skillopt_ray.llm.ledger import stage_of_key
from skillopt_ray.loop.schedule import Stage
from skillopt_ray.runs.records import SKIP_NO_REWRITE, Evaluation, GateRecord
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.state import RunState
from skillopt_ray.skill.document import skill_hash
from skillopt_ray.stages.gate import GatePolicy
from skillopt_ray.stages.judge import Judge, Material, material, outcome
from skillopt_ray.stages.rollout import check_data, check_infra, repeat_context, rollout_repeats, summarize
from skillopt_ray.stages.sequential_gate import PlayFn, Request, VerdictFn, first_samples, sequential_gate

Progress = Callable[..., None]


class Evaluator:
    def __init__(
        self,
        rd: RunDir,
        runner: Any,
        policy: GatePolicy,
        env: Any,
        max_infra_fraction: float,
        progress: Progress,
        seed: int = 42,
        max_data_fraction: float = 1.0,
        judge: Optional[Judge] = None,
    ):
        self.rd = rd
        self.runner = runner
        self.policy = policy
        self.env = env  # the env config: max_turns, history_window
        self.max_infra_fraction = max_infra_fraction
        self.max_data_fraction = max_data_fraction  # a split's evaluation past it stops the run (check_data)
        self.progress = progress
        self.seed = seed  # the run's seed: the batch seed of every evaluation (a benchmark may randomise by it)
        self.scores: dict[str, Evaluation] = {}  # evaluation key -> scores: the score cache
        # the sequential gate's extra samples beyond an evaluation's own: evaluation key -> task id -> gate scores
        self.extra: dict[str, dict[str, list[float]]] = {}
        self.judge = judge  # scores rubric tasks and compares their outcomes pairwise in the gate (stages/judge.py)
        if judge is not None:  # the comparisons earlier commands on this run directory counted (a resume's replays)
            judge.stats.counted = Counter(rd.read_judge_counted())
        self.materials: dict[str, Material] = {}  # judged tasks (a rubric, no rule check): what the judge reads
        # judged tasks' outcomes per evaluation key and task, in sample order (the evaluation's own, then the gate's)
        self.outcomes: dict[str, dict[str, list[str]]] = {}

    def load(self) -> None:
        """The score cache of an earlier command on this run directory, and its sequential gates' samples."""
        self.scores = self.rd.scores()
        for key, ev in self.scores.items():
            if ev.outcomes:
                self.outcomes[key] = {t: list(v) for t, v in ev.outcomes.items()}
            for t, m in (ev.materials or {}).items():
                self.materials[t] = Material(t, m["prompt"], m["rubric"])
        for gate in self.rd.gates():
            self.remember(gate)

    def context(self, key: str, training: bool, seed: Optional[int] = None) -> EpisodeContext:
        """Episode settings; `seed` is the batch's seed (a training batch's, an epoch sample's), else the run's."""
        return EpisodeContext(
            key=key,
            training=training,
            max_turns=self.env.max_turns,
            history_window=self.env.history_window,
            seed=self.seed if seed is None else seed,
            stage=stage_of_key(key),
        )

    async def play(
        self,
        tasks: list[Task],
        skill: str,
        key: str,
        what: str,
        training: bool = False,
        seed: Optional[int] = None,
        repeats: int = 1,
    ) -> list[Any]:
        """Episodes of a skill on tasks, uncached (training rollouts and the epoch boundary's pairs); with
        `repeats`, that many of each task, a task's repeats side by side."""
        ctx = self.context(key, training, seed)
        res = await rollout_repeats(self.runner, tasks, skill, ctx, repeats, self.max_infra_fraction, what)
        await self.judged(res, key)
        return res

    async def judged(
        self, results: list[Any], key: str, agreement: bool = False, samples: Optional[list[str]] = None
    ) -> None:
        """Episodes only the judge can score get its scores (in place), and their tasks are remembered as judged;
        with `agreement`, rule-checked episodes with a rubric are judged too, to count the agreement. `samples`:
        each episode's sample key, where `key` does not tell them apart (Judge.score_results)."""
        if self.judge is None:
            return
        await self.judge.score_results(results, key, agreement, samples)
        for r in results:
            m = material(r)
            if m is not None and r.info["judge"].get("unscored") is False and "score" in r.info["judge"]:
                self.materials[r.task_id] = m

    def save_judge(self) -> None:
        """judge.json: the judge's counts of this command added to the earlier commands' (nothing when it judged
        nothing), with which comparisons are counted: a resumed command meets again, answered by the response
        cache, the comparisons the stopped one counted, and counts them no second time."""
        if self.judge is None or not self.judge.stats.seen:
            return
        before = self.rd.read_judge()
        stats = self.judge.stats
        counted = stats.ledger()
        self.rd.write_judge({k: int(before.get(k) or 0) + v for k, v in stats.as_dict().items()}, counted)
        self.judge.stats = type(stats)(seen=stats.seen, counted=Counter(counted))

    def keep_outcomes(self, key: str, results: list[Any]) -> None:
        """The judged tasks' outcomes of an evaluation, in the order of its samples (scored episodes only)."""
        store = self.outcomes.setdefault(key, {})
        for r in results:
            if r.scored and r.task_id in self.materials:
                store.setdefault(r.task_id, []).append(outcome(r))

    @property
    def repeats(self) -> int:
        """Episodes per task (optimizer.rollouts_per_task)."""
        return self.policy.repeats

    def split_signature(self, tasks: list[Task]) -> str:
        """The split's part of a score-cache key; repeated rollouts are another measurement, so another key."""
        blob = "|".join(t.task_id for t in tasks) + f"|{self.env.max_turns}|{self.env.history_window}"
        if self.repeats > 1:
            blob += f"|repeats={self.repeats}"
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def key_for(self, skill: str, tasks: list[Task]) -> str:
        """The score-cache key of a skill's evaluation on a split."""
        return f"{skill_hash(skill)}|{self.split_signature(tasks)}"

    async def evaluate(
        self, skill: str, tasks: list[Task], what: str, stop: Optional[Callable[[EpisodeResult], bool]] = None
    ) -> tuple[str, Evaluation]:
        """Score a skill on a split, cached by skill content hash and split signature. With `stop`, the episodes
        left once it says so are not played; such a partial evaluation is returned, never cached."""
        key = self.key_for(skill, tasks)
        if key not in self.scores:
            self.progress(stage=Stage.validate(what), done=0, total=len(tasks) * self.repeats)
            res = await rollout_repeats(
                self.runner,
                tasks,
                skill,
                self.context(f"eval/{skill_hash(skill)}", False),
                self.repeats,
                self.max_infra_fraction,
                what,
                stop,
            )
            await self.judged(res, f"eval/{skill_hash(skill)}", agreement=True)
            check_data(res, self.max_data_fraction, what)
            stats = Evaluation.from_dict(summarize(res, self.repeats).to_dict())
            if stats.not_played:
                return key, stats
            self.outcomes.pop(key, None)
            self.keep_outcomes(key, res)
            if self.outcomes.get(key):
                stats.outcomes = {t: list(v) for t, v in self.outcomes[key].items()}
                stats.materials = {
                    t: {"prompt": self.materials[t].prompt, "rubric": self.materials[t].rubric} for t in stats.outcomes
                }
            self.scores[key] = stats
            self.save_judge()  # before the record a resume starts from: a kill then loses no count it will not replay
            self.rd.append_score(key, stats)
        return key, self.scores[key]

    def compare(self, cand: Evaluation, st: RunState, n_selection: int) -> tuple[float, float, float, int]:
        """(candidate, current, best) gate scores for a decision, and the number of tasks compared.

        Without infra or data errors on either side these are the reference's numbers: the candidate's
        mean and the stored current and best scores. Otherwise each side is scored on the tasks both
        sides scored, so an infrastructure failure never moves a decision."""
        cur, best = self.scores.get(st.current_eval), self.scores.get(st.best_eval)
        cur_score, best_score = cast(float, st.current_score), cast(float, st.best_score)  # set by the baseline
        n = n_selection * self.repeats  # episodes: every repeat of every task scored
        full = cand.n_scored == n and cur is not None and cur.n_scored == n and (best is None or best.n_scored == n)
        if cur is None or full:
            return self.policy.score(cand), cur_score, best_score, cand.n_scored // self.repeats
        c, cur_s, common = self.policy.like_for_like(cand, cur)
        best_s = self.policy.like_for_like(cand, best)[1] if best else best_score
        return c, cur_s, best_s, common

    def certain_reject(self, st: RunState) -> Optional[Callable[[EpisodeResult], bool]]:
        """The gate's early-stop predicate against the current skill's evaluation (None when early stop is off)."""
        if not self.policy.stops_early:
            return None
        return self.policy.certain_reject(self.scores[st.current_eval])

    async def gate(
        self, candidate: Optional[str], st: RunState, selection: list[Task], current_skill: str = ""
    ) -> GateRecord:
        """The gate on a step's candidate: evaluated on the selection split (stopped early when the reject is
        certain) and compared with the current and best skills. The sequential gate also plays the current
        skill (`current_skill`, its text) where the decision is close."""
        if candidate is None:
            return GateRecord(action=SKIP_NO_REWRITE)
        self.progress(stage="gate")
        eval_key, ev = await self.evaluate(candidate, selection, "selection", self.certain_reject(st))
        current = self.scores[st.current_eval]
        if self.policy.sequential:
            rec = await self.sequential((candidate, current_skill), (eval_key, ev), st, selection)
        elif ev.not_played:  # stopped early: rejected for certain, its full score never measured
            return self.policy.early_record(ev, current, cast(float, st.current_score), cast(float, st.best_score))
        else:
            rec = self.policy.step_record(eval_key, ev, current, self.compare(ev, st, len(selection)))
        return self.policy.refuse_regressions(rec, self.samples(eval_key), self.samples(st.current_eval))

    def samples(self, key: str) -> dict[str, list[float]]:
        """Every sample of an evaluation as gate scores: its own repeats, then the sequential gate's extra ones."""
        own = first_samples(self.scores[key], self.policy.per_episode)
        return {t: own[t] + self.extra.get(key, {}).get(t, []) for t in own}

    def remember(self, gate: GateRecord) -> None:
        """Take a sequential gate's extra samples from its record (a resumed run's memoized gate included)."""
        t = gate.gate_test
        if t is None or t.get("test") != "sequential" or not gate.eval_key:
            return
        self.extra[gate.eval_key] = {k: list(v) for k, v in t.get("candidate_samples", {}).items()}
        self.extra[t["current_eval"]] = {k: list(v) for k, v in t.get("current_samples", {}).items()}
        # the judged tasks' outcomes: the evaluation's own, then those of the extra samples
        for key, extra_outcomes in (
            (gate.eval_key, t.get("candidate_outcomes")),
            (t["current_eval"], t.get("current_outcomes")),
        ):
            if extra_outcomes:
                own = self.own_outcomes(key)
                self.outcomes[key] = {
                    k: own.get(k, []) + list(extra_outcomes.get(k, [])) for k in {*own, *extra_outcomes}
                }

    def own_outcomes(self, key: str) -> dict[str, list[str]]:
        """The judged tasks' outcomes of an evaluation's own samples (its score-cache entry)."""
        ev = self.scores.get(key)
        return {k: list(v) for k, v in ((ev.outcomes if ev else None) or {}).items()}

    def extra_outcomes(self, key: str) -> dict[str, list[str]]:
        """The judged tasks' outcomes of the sequential gates' extra samples of an evaluation, in sample order."""
        own = self.own_outcomes(key)
        got = {t: v[len(own.get(t, [])) :] for t, v in self.outcomes.get(key, {}).items()}
        return {t: v for t, v in got.items() if v}

    async def sequential(
        self, skills_: tuple[str, str], evaluated: tuple[str, Evaluation], st: RunState, selection: list[Task]
    ) -> GateRecord:
        """The sequential paired gate: the first pass against the current skill's samples, then more pairs where
        the decision is close; the extra samples are kept for later gates and written in the record."""
        eval_key, ev = evaluated
        cur_key = st.current_eval
        skills = {"candidate": skills_[0], "current": skills_[1]}
        keys = {"candidate": eval_key, "current": cur_key}
        self.extra.setdefault(eval_key, {})
        self.extra.setdefault(cur_key, {})
        out = await sequential_gate(
            self.policy.rule,
            self.samples(eval_key),
            self.samples(cur_key),
            self._player(skills, keys, {t.task_id: t for t in selection}),
            ev.n_scored,
            self._verdict(keys),
            frozenset(self.materials),
            self._replayed(keys),
        )
        extra = SequentialSamples(
            current_eval=cur_key,
            candidate_samples=self.extra[eval_key],
            current_samples=self.extra[cur_key],
        )
        if self.materials:  # judged tasks: their extra samples' outcomes, for a resumed run's judge
            extra["candidate_outcomes"] = self.extra_outcomes(eval_key)
            extra["current_outcomes"] = self.extra_outcomes(cur_key)
        return self.policy.sequential_record(
            eval_key, ev, self.scores[cur_key], self.compare(ev, st, len(selection)), out, extra
        )

    def _verdict(self, keys: dict[str, str]) -> Optional[VerdictFn]:
        """The sequential gate's judge of a judged task's pair j: the current skill's outcome against the
        candidate's, through the judge (None where an outcome is not known: an error, never a win or a loss)."""
        judge = self.judge
        if judge is None or not self.materials:
            return None

        async def verdict(task_id: str, j: int) -> Optional[float]:
            cur = self.outcomes.get(keys["current"], {}).get(task_id, [])
            cand = self.outcomes.get(keys["candidate"], {}).get(task_id, [])
            identity = f"{keys['current']}|{keys['candidate']}|{task_id}|{j}"  # one gate's pair j of the task
            if j >= len(cur) or j >= len(cand):
                judge.missing_pair(identity)
                return None
            reask = self.policy.rule.judge_reask
            return await judge.pairwise(self.materials[task_id], cur[j], cand[j], f"gate/{task_id}", reask, identity)

        return verdict

    def _replayed(self, keys: dict[str, str]) -> Callable[[str], bool]:
        """Whether a judged task's outcomes so far, on both sides, replay their first ones word for word (only
        then do equal verdicts settle it: the judge would compare the same texts again)."""

        def replayed(task_id: str) -> bool:
            sides = [self.outcomes.get(keys[w], {}).get(task_id, []) for w in ("candidate", "current")]
            return all(side and len(set(side)) == 1 for side in sides)

        return replayed

    def _player(self, skills: dict[str, str], keys: dict[str, str], by_id: dict[str, Task]) -> PlayFn:
        """The sequential gate's `play`: the next sample of each (skill, task) asked, in its own repeat context of
        the skill's evaluation (so a resumed run replays it from the response cache), both skills at once."""

        async def one(who: str, items: list[tuple[int, str]]) -> list[tuple[int, Optional[float]]]:
            store = self.extra[keys[who]]
            ctx = self.context(f"eval/{skill_hash(skills[who])}", False)
            ctxs = [repeat_context(ctx, self.repeats + len(store.get(t, []))) for _, t in items]
            results = await self.runner.run([by_id[t] for _, t in items], skills[who], ctxs)
            await self.judged(results, ctx.key, samples=[c.key for c in ctxs])
            check_infra(results, self.max_infra_fraction, "selection")
            self.keep_outcomes(keys[who], results)
            out: list[tuple[int, Optional[float]]] = []
            for (i, t), r in zip(items, results):
                score = self.policy.per_episode(r.hard, r.soft) if r.scored else None
                if score is not None:
                    store.setdefault(t, []).append(score)
                out.append((i, score))
            return out

        async def play(requests: list[Request]) -> list[Optional[float]]:
            groups: dict[str, list[tuple[int, str]]] = {"candidate": [], "current": []}
            for i, (who, t) in enumerate(requests):
                groups[who].append((i, t))
            self.progress(stage=Stage.validate("selection"), done=0, total=len(requests))
            done = await asyncio.gather(*(one(who, items) for who, items in groups.items() if items))
            scores: list[Optional[float]] = [None] * len(requests)
            for i, score in (pair for part in done for pair in part):
                scores[i] = score
            return scores

        return play
