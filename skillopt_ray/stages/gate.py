"""Stage 6 — gate: score the candidate on the selection split; accept only on strict improvement.

`GatePolicy` is built once from the optimizer config and is the one reader of the gate metric: it turns an
evaluation into a gate score, compares like for like, decides, and writes the decision as a `GateRecord`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Optional

from skillopt_envs.base import EpisodeResult

from skillopt_ray.base.stats import GateTestDict, Interval, PairedTest, SequentialSamples, mean_interval, paired_test
from skillopt_ray.runs.records import (
    ACCEPT,
    ACCEPT_NEW_BEST,
    ACCEPTING,
    FORCE_ACCEPT,
    REJECT,
    Evaluation,
    GateDecisionFields,
    GateRecord,
    is_accept,
)
from skillopt_ray.stages.sequential_gate import SequentialOutcome, SequentialRule

__all__ = ["ACCEPT", "ACCEPTING", "ACCEPT_NEW_BEST", "FORCE_ACCEPT", "REJECT", "GateDecision", "GatePolicy"]

is_accepted = is_accept  # the records' one definition, under the stage's older name

# optimizer.gate_test=auto: below this many selection tasks the paper's gate accepts too many worse candidates
# (scripts/bench_gate.py: 7-8% at 18 tasks, 2% at 100) and the sequential gate takes over
SMALL_SELECTION = 30


def gate_score(hard: float, soft: float, metric: str, mixed_weight: float) -> float:
    if metric == "hard":
        return hard
    if metric == "soft":
        return soft
    if metric == "mixed":
        return (1 - mixed_weight) * hard + mixed_weight * soft
    raise ValueError(f"unknown gate metric {metric!r}")


@dataclass
class GateDecision:
    action: str
    candidate_score: float
    current_score: float
    best_score: float

    @property
    def accepted(self) -> bool:
        return is_accept(self.action)

    def to_dict(self) -> GateDecisionFields:
        return GateDecisionFields(
            action=self.action,
            candidate_score=self.candidate_score,
            current_score=self.current_score,
            best_score=self.best_score,
        )


def decide(candidate_score: float, current_score: float, best_score: float, use_gate: bool) -> GateDecision:
    """Strict improvement over the current score accepts; ties reject; use_gate=False force-accepts."""
    if not use_gate:
        return GateDecision(FORCE_ACCEPT, candidate_score, current_score, best_score)
    if candidate_score > current_score:
        action = ACCEPT_NEW_BEST if candidate_score > best_score else ACCEPT
        return GateDecision(action, candidate_score, current_score, best_score)
    return GateDecision(REJECT, candidate_score, current_score, best_score)


def flipped(candidate: Evaluation, current: Evaluation, repeats: int = 1) -> dict[str, list[str]]:
    """Selection tasks whose hard result changed between the current skill's evaluation and the candidate's
    (with repeated rollouts: whose mean hard score went up or down)."""
    common = set(candidate.tasks) & set(current.tasks)
    if repeats > 1:
        h = lambda ev, t: ev.tasks[t][0]  # noqa: E731
        return {
            "to_pass": sorted(t for t in common if h(candidate, t) > h(current, t)),
            "to_fail": sorted(t for t in common if h(candidate, t) < h(current, t)),
        }
    won = lambda ev, t: bool(ev.tasks[t][0])  # noqa: E731
    return {
        "to_pass": sorted(t for t in common if won(candidate, t) and not won(current, t)),
        "to_fail": sorted(t for t in common if won(current, t) and not won(candidate, t)),
    }


def deterministic_target(harness: str, temperature: Optional[float]) -> bool:
    """The target replays the same episode for a task (a chat model at temperature 0): what
    optimizer.gate_seq_deterministic=auto follows."""
    return harness == "chat" and temperature == 0


@dataclass(frozen=True)
class GatePolicy:
    metric: str = "hard"  # optimizer.gate_metric: hard | soft | mixed
    mixed_weight: float = 0.5
    use_gate: bool = True  # False: every step's candidate is force-accepted
    early_stop: bool = False  # optimizer.gate_early_stop
    test: str = "none"  # optimizer.gate_test: none (strict improvement only) | paired_bootstrap | sign
    alpha: float = 0.05  # optimizer.gate_alpha
    repeats: int = 1  # optimizer.rollouts_per_task: episodes per task, a task's score is their mean
    rule: SequentialRule = SequentialRule()  # optimizer.gate_seq_*: the sequential gate's boundaries
    no_regression: bool = False  # optimizer.gate_no_regression

    @staticmethod
    def from_config(o: Any, n_selection: Optional[int] = None, deterministic_target: bool = False) -> GatePolicy:
        """The policy of a run; `gate_test=auto` becomes the sequential gate on a selection split of fewer than
        SMALL_SELECTION tasks (`n_selection`), else the reference's strict improvement. `deterministic_target`: the
        target replays the same episode for a task (gate_seq_deterministic=auto follows it)."""
        test = getattr(o, "gate_test", "none")
        if test == "auto":
            test = "sequential" if n_selection is not None and n_selection < SMALL_SELECTION else "none"
        return GatePolicy(
            o.gate_metric,
            o.mixed_weight,
            o.use_gate,
            o.gate_early_stop,
            test,
            getattr(o, "gate_alpha", 0.05),
            getattr(o, "rollouts_per_task", 1),
            SequentialRule(
                accept_at=getattr(o, "gate_seq_accept_at", 5.0),
                reject_at=getattr(o, "gate_seq_reject_at", 3.0),
                final_at=getattr(o, "gate_seq_final_at", 3.0),
                extra_budget=getattr(o, "gate_seq_budget", 3.0),
                min_extra=getattr(o, "gate_seq_min_extra", 24),
                deterministic={"true": True, "false": False}.get(
                    str(getattr(o, "gate_seq_deterministic", "auto")).lower(), deterministic_target
                ),
                interim_share=getattr(o, "gate_seq_look_share", 1.0),
                task_p=getattr(o, "gate_seq_task_p", 0.1),
                judge_reask=getattr(o, "gate_judge_reask", 1),
            ),
            bool(getattr(o, "gate_no_regression", False)),
        )

    def refuse_regressions(
        self, rec: GateRecord, candidate: dict[str, list[float]], current: dict[str, list[float]]
    ) -> GateRecord:
        """optimizer.gate_no_regression: an accepted candidate is rejected when any selection task the current skill
        scored is worse under it (a lower mean over all its samples) or was not scored (fails closed)."""
        if not (self.no_regression and rec.accepted):
            return rec
        worse = sorted(
            t for t, cur in current.items()
            if cur and (not candidate.get(t) or sum(candidate[t]) / len(candidate[t]) < sum(cur) / len(cur))
        )  # fmt: skip
        if not worse:
            return rec
        shown = ", ".join(worse[:5]) + (" ..." if len(worse) > 5 else "")
        why = f"; refused by optimizer.gate_no_regression: {len(worse)} selection task(s) worse ({shown})"
        return replace(rec, action=REJECT, reason=(rec.reason or "") + why)

    @property
    def sequential(self) -> bool:
        """The step gate plays more paired episodes where the decision is close (optimizer.gate_test=sequential)."""
        return self.test == "sequential" and self.use_gate

    def extra_episodes(self, first_pass: int, n_tasks: Optional[int] = None) -> int:
        """The most extra episodes one decision may play after a first pass of `first_pass` (0 but for the
        sequential gate, and 0 on `n_tasks` selection tasks too few ever to accept: it plays no extra pair)."""
        if not self.sequential or (n_tasks is not None and n_tasks < self.rule.min_tasks):
            return 0
        return self.rule.extra_for(first_pass)

    def per_episode(self, hard: float, soft: float) -> float:
        return gate_score(hard, soft, self.metric, self.mixed_weight)

    def paired_test(self, candidate: Evaluation, current: Evaluation) -> PairedTest:
        """The configured test on per-task gate-score differences (candidate minus current), tasks both scored."""
        common = sorted(set(candidate.tasks) & set(current.tasks))

        def per_task(ev: Evaluation, t: str) -> float:
            return gate_score(ev.tasks[t][0], ev.tasks[t][1], self.metric, self.mixed_weight)

        # the slow update's gate looks once: under the sequential setting it takes the sign test on the first pass
        test = "sign" if self.test == "sequential" else self.test
        return paired_test(test, [per_task(candidate, t) - per_task(current, t) for t in common], self.alpha)

    def judge(
        self,
        candidate: Evaluation,
        current: Evaluation,
        scores: tuple[float, float, float],
        use_gate: Optional[bool] = None,
    ) -> tuple[GateDecision, Optional[PairedTest]]:
        """The decision on a fully evaluated candidate: the reference's strict improvement, and with a paired
        test also a significant per-task improvement (an accept the test does not support becomes a reject).
        `use_gate` overrides the step gate's setting (the slow update is gated by its own)."""
        cand, cur, best = scores
        gated = self.use_gate if use_gate is None else use_gate
        d = decide(cand, cur, best, gated)
        if not (gated and self.test != "none"):
            return d, None
        t = self.paired_test(candidate, current)
        if d.accepted and not t.significant:
            d = GateDecision(REJECT, cand, cur, best)
        return d, t

    def score(self, ev: Evaluation) -> float:
        return gate_score(ev.hard, ev.soft, self.metric, self.mixed_weight)

    def interval(self, ev: Evaluation) -> Interval:
        """95% interval of the gate score over the tasks scored (each task the mean of its repeats), n = tasks."""
        return mean_interval([gate_score(h, s, self.metric, self.mixed_weight) for h, s in ev.tasks.values()])

    def like_for_like(self, candidate: Evaluation, current: Evaluation) -> tuple[float, float, int]:
        """Gate scores of candidate and current over the tasks both scored, and how many tasks that is.

        With no infra or data errors on either side this is the plain mean over the whole split; an
        episode that could not be scored on one side removes that task from both, so an infrastructure
        failure never moves a decision."""
        common = sorted(set(candidate.tasks) & set(current.tasks))
        if not common:
            return 0.0, 0.0, 0

        def score(ev: Evaluation) -> float:
            hard = sum(ev.tasks[t][0] for t in common) / len(common)
            soft = sum(ev.tasks[t][1] for t in common) / len(common)
            return gate_score(hard, soft, self.metric, self.mixed_weight)

        return score(candidate), score(current), len(common)

    def reason(
        self,
        action: str,
        candidate: float,
        current: float,
        best: float,
        n_tasks: int,
        test: Optional[PairedTest] = None,
    ) -> str:
        """One sentence a user can read: the scores compared, the rule, the outcome."""
        if test is not None:
            return self._paired_reason(action, candidate, current, best, n_tasks, test)
        compared = (
            f"candidate {candidate:.4f} vs current {current:.4f} (best {best:.4f}), "
            f"{self.metric} score over {n_tasks} selection tasks"
        )
        if action == FORCE_ACCEPT:
            return f"{compared}: accepted without a gate (forced)"
        if action in (ACCEPT, ACCEPT_NEW_BEST):
            extra = " and the best so far" if action == ACCEPT_NEW_BEST else ", not above the best"
            return f"{compared}: accepted, strictly above the current score{extra}"
        if candidate == current:
            return f"{compared}: rejected, a tie (only a strict improvement is accepted)"
        return f"{compared}: rejected, below the current score"

    def _paired_reason(
        self, action: str, candidate: float, current: float, best: float, n_tasks: int, t: PairedTest
    ) -> str:
        """The plain sentence with the paired test's numbers, and why a higher score may still be rejected."""
        evidence = (
            f"; {t.test} on {t.n} paired tasks: mean difference {t.mean_diff:+.4f}, "
            f"{t.level:.0%} interval [{t.lo:+.4f}, {t.hi:+.4f}], p={t.p_value:.4f} "
            f"({t.n_better} better, {t.n_worse} worse)"
        )
        if action == REJECT and candidate > current:
            compared = self.reason(ACCEPT, candidate, current, best, n_tasks).split(": accepted", 1)[0]
            return f"{compared}{evidence}: rejected, above the current score but not significant at alpha={self.alpha}"
        head, outcome = self.reason(action, candidate, current, best, n_tasks).split(": ", 1)
        if action in (ACCEPT, ACCEPT_NEW_BEST):
            outcome = outcome.replace("accepted,", f"accepted, significant at alpha={self.alpha} and", 1)
        return f"{head}{evidence}: {outcome}"

    @property
    def stops_early(self) -> bool:
        """Only the hard gate can call a certain reject before every selection episode is played."""
        return self.early_stop and self.use_gate and self.metric == "hard" and not self.sequential

    def certain_reject(self, current: Evaluation) -> Optional[Callable[[EpisodeResult], bool]]:
        """With early stop: a predicate that says when a candidate has lost so many selection episodes that,
        winning all the rest, it still could not beat the current score (ties reject). It counts only tasks the
        current skill's evaluation scored; a task dropped later for an infrastructure failure removes at most
        one of the current skill's wins, so the verdict stands. With repeated rollouts an episode lost costs
        its task 1/repeats (a task scores the mean of its repeats)."""
        if not self.stops_early:
            return None
        cur = current.tasks
        cur_wins = sum(v[0] for v in cur.values())
        lost = [0.0]

        def stop(r: EpisodeResult) -> bool:
            if r.scored and r.task_id in cur:
                lost[0] += (1.0 - r.hard) / self.repeats
            return len(cur) - lost[0] <= cur_wins

        return stop

    def step_record(
        self, eval_key: str, ev: Evaluation, current: Evaluation, scores: tuple[float, float, float, int]
    ) -> GateRecord:
        """The gate's decision on a candidate evaluated on the whole selection split."""
        cand, cur, best, n = scores
        d, test = self.judge(ev, current, (cand, cur, best))
        reason = self.reason(d.action, cand, cur, best, n, test)
        return self._full_record(d.action, reason, eval_key, (ev, current), scores, test.to_dict() if test else None)

    def _full_record(
        self,
        action: str,
        reason: str,
        eval_key: str,
        evs: tuple[Evaluation, Evaluation],
        scores: tuple[float, float, float, int],
        gate_test: Optional[GateTestDict],
    ) -> GateRecord:
        """The record of a decision on a candidate evaluated on the whole selection split (`evs`: it and the
        current skill's evaluation)."""
        (ev, current), (cand, cur, best, n) = evs, scores
        return GateRecord(
            action=action,
            candidate_score=cand,
            current_score=cur,
            best_score=best,
            reason=reason,
            flipped=flipped(ev, current, self.repeats),
            eval_key=eval_key,
            selection_hard=ev.hard,
            selection_soft=ev.soft,
            candidate_full_score=self.score(ev),
            tasks_compared=n,
            candidate_scored=ev.n_scored,
            current_scored=current.n_scored,
            gate_metric=self.metric,
            gate_test=gate_test,
        )

    def sequential_record(
        self,
        eval_key: str,
        ev: Evaluation,
        current: Evaluation,
        scores: tuple[float, float, float, int],
        out: SequentialOutcome,
        extra: SequentialSamples,
    ) -> GateRecord:
        """The sequential gate's decision: accepted at a boundary or at the budget's end, with what it paid.
        `extra` holds every extra sample of both skills after this gate and the current skill's evaluation key,
        so a resumed run (and every later gate) sees the same samples."""
        cand, best = scores[0], scores[2]
        action = REJECT
        if out.accepted:
            action = ACCEPT_NEW_BEST if cand > best else ACCEPT
        reason = self.sequential_reason(action, out, scores)
        test = out.to_test_dict(self.alpha)
        test["current_eval"] = extra["current_eval"]
        test["candidate_samples"] = extra["candidate_samples"]
        test["current_samples"] = extra["current_samples"]
        if extra.get("candidate_outcomes") or extra.get("current_outcomes"):
            test["candidate_outcomes"] = extra.get("candidate_outcomes", {})
            test["current_outcomes"] = extra.get("current_outcomes", {})
        return self._full_record(action, reason, eval_key, (ev, current), scores, test)

    def sequential_reason(self, action: str, out: SequentialOutcome, scores: tuple[float, float, float, int]) -> str:
        """One sentence: the paired evidence (pairs and tasks), what was paid, the boundaries and the outcome."""
        cand, cur, best, n = scores
        how = {
            "accept_boundary": f"reached the accept boundary +{out.accept_at:g} with p <= {out.task_p:g} over tasks",
            "reject_boundary": f"reached the reject boundary -{out.reject_at:g}",
            "budget": f"extra episodes spent; accept at +{out.final_at:g} and p <= {out.task_p:g} at the end",
            "too_few_tasks": f"{out.n_tasks} tasks can never reach p <= {out.task_p:g} (each task is one observation; "
            f"at least {self.rule.min_tasks} are needed): no extra pair was played",
            "settled": f"more pairs could not change the decision; accept at +{out.final_at:g} and p <= {out.task_p:g}",
        }[out.stopped]
        if self.rule.deterministic and out.stopped == "budget":  # no extra pair: a repeat would replay the episode
            how = f"a deterministic target counts each task once; accept at +{out.final_at:g}"
        verdict = "accepted" if is_accept(action) else "rejected"
        if action == ACCEPT_NEW_BEST:
            verdict += " and the best so far"
        judged = f"; {out.judge_errors} judged pairs unusable (dropped)" if out.judge_errors else ""
        return (
            f"candidate {cand:.4f} vs current {cur:.4f} (best {best:.4f}), {self.metric} score over {n} selection "
            f"tasks; sequential paired gate: net {out.net:+g} paired wins over {out.pairs} pairs ({out.n_better} "
            f"better, {out.n_worse} worse{judged}) after {out.looks} looks and {out.episodes} episodes (first pass "
            f"{out.first_pass}); over {out.n_tasks} tasks as units {out.tasks_better} better, {out.tasks_worse} worse, "
            f"p={out.p_value:.4f}; paired difference {out.mean_diff:+.4f} [{out.lo:+.4f}, {out.hi:+.4f}]: {how}: "
            f"{verdict}"
        )

    def early_record(self, ev: Evaluation, current: Evaluation, current_score: float, best_score: float) -> GateRecord:
        """A candidate stopped early: rejected for certain; its bound is the score it could at most have reached."""
        if ev.task_repeats is not None:  # repeated rollouts: what the episodes played lost, 1/repeats each
            lost = sum(1.0 - r[0] for t, rs in ev.task_repeats.items() if t in current.tasks for r in rs) / self.repeats
        else:
            lost = sum(1.0 - v[0] for t, v in ev.tasks.items() if t in current.tasks)
        bound = (len(current.tasks) - lost) / len(current.tasks)
        return GateRecord(
            action=REJECT,
            candidate_score=bound,
            current_score=current_score,
            best_score=best_score,
            early_stopped=True,
            episodes_not_played=ev.not_played,
            reason=f"rejected early: after {ev.n_scored} of {ev.n} selection episodes the candidate could reach "
            f"at most {bound:.4f}, not above the current {current_score:.4f} (hard gate; ties reject)",
            tasks_compared=ev.n_scored,
            gate_metric=self.metric,
        )
