"""The sequential paired gate (optimizer.gate_test=sequential): more episodes only where the decision is close.

The candidate plays every selection task once per repeat (the usual first pass) and each episode is paired with
the current skill's episode of the same task and repeat. The evidence is the **net paired wins**: over all pairs,
the candidate's gate score minus the current skill's (for the hard gate, pairs won by the candidate and lost by
the current skill minus the reverse; tied pairs carry no evidence). This is Wald's sequential probability ratio
test on the discordant pairs (under "no difference" a discordant pair favours either side with probability 1/2,
whatever each task's difficulty): its boundaries are constant in the net count.

- net >= `accept_at`: accept; net <= -`reject_at`: reject (a clear loser stops at once);
- otherwise play more pairs (the candidate and the current skill on the same task, fresh samples) on the tasks
  whose pairs disagreed or whose samples varied, a few per look, until `extra_budget` x (tasks x repeats) more
  episodes are paid; then accept at `final_at`.
- When the target is deterministic (a chat model at temperature 0), a repeated pair replays the first one: counting
  it again would turn one task's difference into several "wins". Each task then counts once (its first sample) and
  no extra pairs are played; the decision is the first pass's net against `final_at`.
- On a large split the first look already holds many pairs: both accept margins grow with the square root of the
  first look's discordant pairs (`margin_per_sqrt`), so the first look's overshoot cannot accept a worse candidate.

The current skill's extra samples are kept and reused by later gates (a pair then costs one episode); an accepted
candidate's samples become the current skill's. The margins are calibrated by `scripts/bench_gate.py`
(docs/performance.md): worse candidates accepted at most 2% at 18 selection tasks, at about 1.7x the first pass's
episodes on average. Every extra sample has its own repeat context, so a resumed run replays them from the
response cache and reaches the same decisions.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, cast

from skillopt_ray.base.stats import GateTestDict, diff_interval, sign_test_p

# a request for one more sample: (which skill: "candidate" | "current", task id)
Request = tuple[str, str]
# plays the requests (each the next sample of that skill on that task) and returns each one's gate score, or None
# when the episode could not be scored (infrastructure or data error: the pair is dropped, never a 0)
PlayFn = Callable[[list[Request]], Awaitable[list[Optional[float]]]]


@dataclass(frozen=True)
class SequentialRule:
    """The boundaries, in net paired wins (task units; a hard pair counts -1, 0 or +1)."""

    accept_at: float = 7.0
    reject_at: float = 2.0
    final_at: float = 4.0
    extra_budget: float = 2.0  # extra episodes at most, as a multiple of the first pass's episodes
    min_extra: int = 24  # but at least this many: a handful of tasks still gets pairs enough to reach a boundary
    margin_per_sqrt: float = 1.4  # accept margins at least this x sqrt(first look's discordant pairs)
    pairs_per_look: int = 0  # 0: about one in nine tasks per look (at least 2)
    # the target replays the same episode for the same task (a chat model at temperature 0): a repeat is not fresh
    # evidence, so each task counts once and no extra pairs are played
    deterministic: bool = False

    def margins(self, first_discordant: int) -> tuple[float, float]:
        """(accept, final) margins for a split whose first look had this many discordant pairs."""
        grown = math.ceil(self.margin_per_sqrt * math.sqrt(first_discordant))
        accept = max(self.accept_at, float(grown))
        return accept, max(self.final_at, accept - (self.accept_at - self.final_at))

    def extra_for(self, first_pass: int) -> int:
        """The most extra episodes a decision may play after a first pass of `first_pass` episodes: none for a
        deterministic target or without a budget."""
        if self.deterministic or self.extra_budget <= 0:
            return 0
        return max(self.min_extra, math.floor(self.extra_budget * first_pass))

    def per_look(self, n_tasks: int) -> int:
        return self.pairs_per_look or max(2, math.ceil(n_tasks / 9))


@dataclass
class SequentialOutcome:
    """What the sequential gate did: the decision, what it paid, and the paired evidence."""

    accepted: bool
    net: float
    discordant: int
    pairs: int
    looks: int
    episodes: int  # paid for this decision: the first pass plus the extra samples played
    first_pass: int
    accept_at: float
    reject_at: float
    final_at: float
    stopped: str  # accept_boundary | reject_boundary | budget
    mean_diff: float
    lo: float
    hi: float
    n_tasks: int
    n_better: int
    n_worse: int
    p_value: float  # the sign test over every pair, for reading only: the boundaries decide
    candidate_extra: dict[str, list[float]] = field(default_factory=dict)
    current_extra: dict[str, list[float]] = field(default_factory=dict)

    def to_test_dict(self, alpha: float) -> GateTestDict:
        """The gate record's `gate_test` entry: the paired test's usual keys plus the sequential ones."""
        d = asdict(self)
        d.pop("accepted")
        # the sequential fields come in by name from asdict, after the paired test's own keys
        return cast(
            GateTestDict,
            {"test": "sequential", "alpha": alpha, "n": self.n_tasks, "level": 0.95, "significant": self.accepted, **d},
        )


def pair_stats(cand: dict[str, list[float]], cur: dict[str, list[float]]) -> tuple[float, int, int, int, int]:
    """(net, discordant, pairs, better, worse) over the pairs: sample j of a task against sample j."""
    net, disc, pairs, better, worse = 0.0, 0, 0, 0, 0
    for t, cs in cand.items():
        ks = cur.get(t, [])
        for c, k in zip(cs, ks):
            pairs += 1
            d = c - k
            net += d
            if d != 0:
                disc += 1
                better += d > 0
                worse += d < 0
    return net, disc, pairs, better, worse


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _choose(cand: dict[str, list[float]], cur: dict[str, list[float]], k: int) -> list[str]:
    """The next tasks to sample: where samples disagreed or varied first, then where the current skill already
    has an unpaired sample (a pair for one episode), then the least sampled; ties in task order."""

    def priority(i_t: tuple[int, str]) -> tuple[bool, bool, int, int]:
        i, t = i_t
        cs, ks = cand[t], cur.get(t, [])
        varied = len(set(cs) | set(ks)) > 1
        cheap = len(ks) > len(cs)
        return (varied, cheap, -len(cs), -i)

    ranked = sorted(enumerate(cand), key=priority, reverse=True)
    return [t for _, t in ranked[:k]]


async def sequential_gate(
    rule: SequentialRule,
    cand: dict[str, list[float]],
    cur: dict[str, list[float]],
    play: PlayFn,
    first_pass: int,
) -> SequentialOutcome:
    """Decide on a candidate from its first-pass samples `cand` and the current skill's samples `cur` (task id ->
    gate score per sample, in sample order), playing more samples through `play` while the decision is close.
    Only tasks both sides scored take part. `cand` and `cur` are not changed; the extra samples are returned."""
    cand, cur = _paired_tasks(cand, cur, 1 if rule.deterministic else None)
    start_c = {t: len(v) for t, v in cand.items()}
    start_k = {t: len(v) for t, v in cur.items()}
    net, disc, *_ = pair_stats(cand, cur)
    accept_at, final_at = rule.margins(disc)
    budget = rule.extra_for(first_pass)
    extra, looks, stopped = 0, 1, "budget"
    while True:
        net, disc, *_ = pair_stats(cand, cur)
        if net >= accept_at:
            stopped = "accept_boundary"
            break
        if net <= -rule.reject_at:
            stopped = "reject_boundary"
            break
        if extra >= budget or not cand:
            break
        requests = _look(cand, cur, rule.per_look(len(cand)), budget - extra)
        scores = await play(requests)
        extra += len(requests)
        looks += 1
        _absorb(requests, scores, cand, cur)
    net, disc, pairs, better, worse = pair_stats(cand, cur)
    accepted = stopped == "accept_boundary" or (stopped == "budget" and net >= final_at)
    diffs = [_mean(cand[t]) - _mean(cur[t]) for t in cand]
    iv = diff_interval(diffs)
    return SequentialOutcome(
        accepted=accepted,
        net=net,
        discordant=disc,
        pairs=pairs,
        looks=looks,
        episodes=first_pass + extra,
        first_pass=first_pass,
        accept_at=accept_at,
        reject_at=rule.reject_at,
        final_at=final_at,
        stopped=stopped,
        mean_diff=iv.mean,
        lo=iv.lo,
        hi=iv.hi,
        n_tasks=len(cand),
        n_better=better,
        n_worse=worse,
        p_value=sign_test_p(better, worse),
        candidate_extra={t: v[start_c[t] :] for t, v in cand.items() if len(v) > start_c[t]},
        current_extra={t: v[start_k[t] :] for t, v in cur.items() if len(v) > start_k[t]},
    )


def _paired_tasks(
    cand: dict[str, list[float]], cur: dict[str, list[float]], keep: Optional[int]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Copies of both sides on the tasks both scored; `keep`: the first samples only (1 for a deterministic target,
    whose repeats replay the first)."""
    both = {t: list(v[:keep]) for t, v in cand.items() if v and cur.get(t)}
    return both, {t: list(cur[t][:keep]) for t in both}


def _look(cand: dict[str, list[float]], cur: dict[str, list[float]], k: int, left: int) -> list[Request]:
    """One look's requests: a pair on each of the next `k` tasks (the candidate alone where the current skill has
    an unpaired sample), within the `left` episodes of the budget (at least one pair)."""
    requests: list[Request] = []
    cost = 0
    for t in _choose(cand, cur, k):
        need = 1 if len(cur[t]) > len(cand[t]) else 2
        if cost + need > left and requests:
            break
        requests.append(("candidate", t))
        if need == 2:
            requests.append(("current", t))
        cost += need
    return requests


def _absorb(
    requests: list[Request],
    scores: list[Optional[float]],
    cand: dict[str, list[float]],
    cur: dict[str, list[float]],
) -> None:
    """Add the scored samples; a candidate sample whose current partner failed waits for a later partner, and a
    task with an unscored sample simply gets fewer pairs (never a made-up score)."""
    for (who, t), s in zip(requests, scores):
        if s is not None:
            (cand if who == "candidate" else cur)[t].append(s)


def first_samples(ev: Any, score: Callable[[float, float], float]) -> dict[str, list[float]]:
    """An evaluation's samples per task as gate scores, in repeat order (one per task without repeats)."""
    if ev.task_repeats:
        return {t: [score(r[0], r[1]) for r in rs] for t, rs in ev.task_repeats.items()}
    return {t: [score(v[0], v[1])] for t, v in ev.tasks.items()}
