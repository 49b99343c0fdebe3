"""The sequential paired gate (optimizer.gate_test=sequential): more episodes only where the decision is close.

The candidate plays every selection task once per repeat (the usual first pass) and each episode is paired with
the current skill's episode of the same task and repeat. A pair's difference is the candidate's gate score minus the
current skill's (for the hard gate +1, 0 or -1), or for a judged task (a rubric, no rule check) the judge's pairwise
verdict. Two things must hold to accept:

- **the net paired wins** (the sum over all pairs) reach Wald's boundaries, as in a sequential probability ratio
  test on the discordant pairs: net >= `accept_at` at a look accepts, net <= -`reject_at` rejects (a clear loser
  stops at once), and when the extra episodes (`extra_budget` x the first pass's, at least `min_extra`) run out the
  net must reach `final_at`; on a large split both accept margins grow with the square root of the first look's
  discordant pairs (`margin_per_sqrt`), so the first look's overshoot cannot accept a worse candidate;
- **the task is the unit of evidence**: all pairs of one task (its repeats and its extra pairs) form one observation
  (its mean pair difference), and the exact sign-flip test over tasks must give p <= `task_p` (under "no difference"
  a task's mean difference is as likely negative as positive; the p-value is the share of the 2^n sign assignments
  of the tasks' means whose sum reaches the observed one: a permutation test on the means, so a task that barely
  favours the candidate weighs little). Repeats of a task never count as independent evidence, whatever the
  temperature: a deterministic endpoint replaying 3 tasks 7 times reaches p = 1/8 at best. A split of n tasks can
  never go below 2^-n, so a split of fewer than `min_tasks` tasks pays no extra pair and rejects (a night says so
  before it spends).

More pairs go to the least sampled tasks (judged ones: whose sign is not yet clear; a judged task with `CLEAR_AFTER`
pairs whose mean is `CLEAR_Z` standard errors from zero has its sign, and the test needs every task's sign, not more
of a clear one), a few per look; the choice looks only at each task's |mean| and spread, never its sign, so the test
over tasks stays exact. A task whose repeated pairs replayed the first exactly (the same samples on both sides; for
a judged task, the same outcomes word for word, which `replayed` tells: equal judged verdicts alone are often
chance) is settled and gets no more; once the tasks that could still favour the candidate are too few to reach
`task_p`, no more pairs are paid (exact ties stop costing). A judged pair the judge calls a tie is judged again
`judge_reask` times (both orders each time; its verdict the mean of the rounds): a tie from a noisy judge is mostly
unresolved evidence, and a judge that always prefers the first shown ties every round, so it still never moves the
gate. When the target is known to be deterministic (a chat model at temperature 0), each task keeps its first sample and
no extra pairs are played.

The current skill's extra samples are kept and reused by later gates (a pair then costs one episode); an accepted
candidate's samples become the current skill's. The margins are calibrated by `scripts/bench_gate.py`
(docs/performance.md). Every extra sample has its own repeat context, so a resumed run replays them from the
response cache (and a judged pair from the judge's) and reaches the same decisions.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, cast

from skillopt_ray.base.stats import GateTestDict, diff_interval

# a request for one more sample: (which skill: "candidate" | "current", task id)
Request = tuple[str, str]
# plays the requests (each the next sample of that skill on that task) and returns each one's gate score, or None
# when the episode could not be scored (infrastructure or data error: the pair is dropped, never a 0)
PlayFn = Callable[[list[Request]], Awaitable[list[Optional[float]]]]
# the judged difference of pair j of a task (candidate's sample j against the current skill's sample j): +1, 0, -1,
# or None when the judge's reply was unusable (the pair is dropped and counted, never a win or a loss)
VerdictFn = Callable[[str, int], Awaitable[Optional[float]]]

SETTLED_AFTER = 2  # identical pairs (the first and a replay) that settle a task
CLEAR_AFTER = 4  # pairs before a task's sign can be clear ...
CLEAR_Z = 2.0  # ... its |mean| this many standard errors from zero (scripts/bench_judge.py)
VAR_FLOOR = 0.25  # a task's pair variance is at least this in its standard error (a few equal pairs prove little)
GRID = 60  # observations are exact on multiples of 1/60 (hard and judged pairs are whole numbers; soft ones rounded)


@dataclass(frozen=True)
class SequentialRule:
    """The boundaries in net paired wins (a hard pair counts -1, 0 or +1), the task-level level and the budget."""

    accept_at: float = 5.0
    reject_at: float = 3.0
    final_at: float = 3.0
    extra_budget: float = 3.0  # extra episodes at most, as a multiple of the first pass's episodes
    min_extra: int = 24  # but at least this many: a handful of tasks still gets pairs enough to reach a boundary
    margin_per_sqrt: float = 1.2  # accept margins at least this x sqrt(first look's discordant pairs)
    pairs_per_look: int = 0  # 0: about one in nine tasks per look (at least 2)
    # the target replays the same episode for the same task (a chat model at temperature 0): a repeat is not fresh
    # evidence, so each task keeps its first sample and no extra pairs are played
    deterministic: bool = False
    interim_share: float = 1.0  # a look before the budget's end accepts at this share of task_p (many looks)
    task_p: float = 0.1  # the sign-flip test over tasks must reach this p-value (each task one observation)
    judge_reask: int = 1  # a judged pair called a tie is judged again this many times (0: never)

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

    @property
    def min_tasks(self) -> int:
        """The fewest tasks that can ever accept: all of them favouring the candidate gives p = 2^-n <= task_p."""
        return max(1, math.ceil(-math.log2(self.task_p))) if 0 < self.task_p < 1 else 1


def sign_flip_p(diffs: list[float]) -> float:
    """One-sided exact p-value of sum(diffs) under random signs: the share of the 2^n sign assignments of |d| whose
    sum is at least the observed one (d on a 1/GRID grid; zeros carry nothing)."""
    ws = [round(abs(d) * GRID) for d in diffs]
    observed = sum(w if d > 0 else -w for w, d in zip(ws, diffs))
    ws = [w for w in ws if w]
    if not ws:
        return 1.0
    total = sum(ws)
    import numpy as np  # here, not at the top: an eval or a run's first call does not wait for numpy's import

    dist = np.zeros(2 * total + 1)
    dist[total] = 1.0
    for w in ws:
        dist = (np.roll(dist, w) + np.roll(dist, -w)) / 2  # no wrap: |partial sums| stay within total
    return float(min(1.0, dist[observed + total :].sum()))


@dataclass
class SequentialOutcome:
    """What the sequential gate did: the decision, what it paid, and the paired evidence (in task units)."""

    accepted: bool
    net: float  # net paired wins: the sum over every pair
    discordant: int  # pairs that differ
    pairs: int
    looks: int
    episodes: int  # paid for this decision: the first pass plus the extra samples played
    first_pass: int
    accept_at: float
    reject_at: float
    final_at: float
    stopped: str  # accept_boundary | reject_boundary | budget | too_few_tasks | settled
    mean_diff: float  # the mean over tasks of each task's mean paired difference
    lo: float
    hi: float
    n_tasks: int
    n_better: int  # pairs won by the candidate
    n_worse: int
    p_value: float  # the exact sign-flip test over tasks (each task one observation): it must reach task_p
    task_p: float = 0.1
    tasks_better: int = 0  # tasks whose mean difference favours the candidate
    tasks_worse: int = 0
    judge_errors: int = 0  # judged pairs dropped for an unusable judge reply
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
    """(net, discordant, pairs, better, worse) over the scored pairs: sample j of a task against sample j."""
    ds = [c - k for t, cs in cand.items() for c, k in zip(cs, cur.get(t, []))]
    return sum(ds), sum(d != 0 for d in ds), len(ds), sum(d > 0 for d in ds), sum(d < 0 for d in ds)


@dataclass
class _Evidence:
    """Both sides' samples on the tasks both scored, and each task's pair differences as far as they are known."""

    cand: dict[str, list[float]]
    cur: dict[str, list[float]]
    verdict: Optional[VerdictFn] = None
    judged: frozenset[str] = frozenset()
    replayed: Optional[Callable[[str], bool]] = None  # a judged task's outcomes so far replay its first ones
    diffs: dict[str, list[Optional[float]]] = field(default_factory=dict)

    async def update(self) -> None:
        """Pair differences for the pairs not yet compared (a judged task asks the judge)."""
        for t, cs in self.cand.items():
            have = self.diffs.setdefault(t, [])
            for j in range(len(have), min(len(cs), len(self.cur[t]))):
                if t in self.judged and self.verdict is not None:
                    have.append(await self.verdict(t, j))
                else:
                    have.append(cs[j] - self.cur[t][j])

    def means(self) -> dict[str, float]:
        """Each task's mean difference over its usable pairs (tasks with none take no part)."""
        return {t: s / n for t, (s, n) in self.sums().items()}

    def sums(self) -> dict[str, tuple[float, int]]:
        """Each task's summed difference and its number of usable pairs (tasks with none take no part)."""
        out = {}
        for t, ds in self.diffs.items():
            ok = [d for d in ds if d is not None]
            if ok:
                out[t] = (sum(ok), len(ok))
        return out

    def observations(self) -> list[float]:
        """One value a task for the test over tasks: its mean pair difference (however many pairs it has)."""
        return [s / n for s, n in self.sums().values()]

    def pair_stats(self) -> tuple[float, int, int, int, int]:
        """(net, discordant, pairs, better, worse) over every usable pair."""
        ds = [d for v in self.diffs.values() for d in v if d is not None]
        return sum(ds), sum(d != 0 for d in ds), len(ds), sum(d > 0 for d in ds), sum(d < 0 for d in ds)

    def settled(self, t: str) -> bool:
        """A task whose pairs replayed the first exactly: more of them would carry nothing new. A judged task
        needs its outcomes replayed too (`replayed`; without it, never): equal verdicts of a noisy judge on fresh
        outcomes are often chance, and settling them would drop a task that carries evidence."""
        cs, ks, ds = self.cand[t], self.cur[t], self.diffs.get(t, [])
        same = len(ds) >= SETTLED_AFTER and len(set(cs)) == 1 and len(set(ks)) == 1 and len(set(ds)) == 1
        if t in self.judged:
            return same and self.replayed is not None and self.replayed(t)
        return same

    def clear(self, t: str) -> bool:
        """A judged task whose sign is clear: `CLEAR_AFTER` usable pairs or more, the mean `CLEAR_Z` standard errors
        from zero (the variance at least `VAR_FLOOR`). It depends on |mean|, never the sign. Rule-checked tasks are
        never skipped: there the net paired wins gain from more pairs of a clear winner (scripts/bench_gate.py:
        skipping them cost about a point of gain in the 3-repeat rows)."""
        if t not in self.judged:
            return False
        ok = [d for d in self.diffs.get(t, []) if d is not None]
        n = len(ok)
        if n < CLEAR_AFTER:
            return False
        mean = sum(ok) / n
        var = sum((d - mean) ** 2 for d in ok) / (n - 1)
        return abs(mean) > CLEAR_Z * math.sqrt(max(var, VAR_FLOOR) / n)

    def could_favour(self) -> int:
        """Tasks that favour the candidate or could still come to (not settled)."""
        m = self.means()
        return sum(1 for t in self.cand if m.get(t, 0.0) > 0 or not self.settled(t))

    @property
    def errors(self) -> int:
        return sum(d is None for ds in self.diffs.values() for d in ds)


async def sequential_gate(
    rule: SequentialRule,
    cand: dict[str, list[float]],
    cur: dict[str, list[float]],
    play: PlayFn,
    first_pass: int,
    verdict: Optional[VerdictFn] = None,
    judged: frozenset[str] = frozenset(),
    replayed: Optional[Callable[[str], bool]] = None,
) -> SequentialOutcome:
    """Decide on a candidate from its first-pass samples `cand` and the current skill's samples `cur` (task id -> gate
    score per sample, in sample order), playing more samples through `play` while the decision is close. The
    `judged` tasks' pairs are compared by `verdict` (the judge), the others by their scores; `replayed` says whether
    a judged task's outcomes so far replay its first ones. Only tasks both sides scored take part. `cand` and `cur`
    are not changed; the extra samples are returned."""
    cand, cur = _paired_tasks(cand, cur, 1 if rule.deterministic else None)
    ev = _Evidence(cand, cur, verdict, judged, replayed)
    starts = ({t: len(v) for t, v in cand.items()}, {t: len(v) for t, v in cur.items()})
    await ev.update()
    margins = rule.margins(ev.pair_stats()[1])
    budget = rule.extra_for(first_pass)
    extra, looks = 0, 1
    while True:
        stopped = _stop(rule, ev, margins, extra >= budget)
        if stopped:
            break
        requests = _look(ev, rule.per_look(len(cand)), budget - extra)
        scores = await play(requests)
        extra += len(requests)
        looks += 1
        _absorb(requests, scores, cand, cur)
        await ev.update()
    return _outcome(rule, ev, (stopped, looks, first_pass, extra), margins, starts)


def _stop(rule: SequentialRule, ev: _Evidence, margins: tuple[float, float], spent: bool) -> str:
    """Why the gate stops at this look ("" to play more pairs)."""
    net = ev.pair_stats()[0]
    if net >= margins[0] and sign_flip_p(ev.observations()) <= rule.task_p * rule.interim_share:
        return "accept_boundary"
    if net <= -rule.reject_at:
        return "reject_boundary"
    if len(ev.cand) < rule.min_tasks:
        return "too_few_tasks"
    if spent or not ev.cand:
        return "budget"
    if ev.could_favour() < rule.min_tasks or all(ev.settled(t) for t in ev.cand):
        return "settled"
    return ""


def _outcome(
    rule: SequentialRule,
    ev: _Evidence,
    paid: tuple[str, int, int, int],
    margins: tuple[float, float],
    starts: tuple[dict[str, int], dict[str, int]],
) -> SequentialOutcome:
    stopped, looks, first_pass, extra = paid
    start_c, start_k = starts
    net, disc, pairs, better, worse = ev.pair_stats()
    obs = ev.observations()
    p = sign_flip_p(obs)
    accepted = stopped == "accept_boundary" or (
        stopped in ("budget", "settled") and net >= margins[1] and p <= rule.task_p
    )
    iv = diff_interval(list(ev.means().values()))
    return SequentialOutcome(
        accepted=accepted,
        net=net,
        discordant=disc,
        pairs=pairs,
        looks=looks,
        episodes=first_pass + extra,
        first_pass=first_pass,
        accept_at=margins[0],
        reject_at=rule.reject_at,
        final_at=margins[1],
        stopped=stopped,
        mean_diff=iv.mean,
        lo=iv.lo,
        hi=iv.hi,
        n_tasks=len(obs),
        n_better=better,
        n_worse=worse,
        p_value=p,
        task_p=rule.task_p,
        tasks_better=sum(o > 0 for o in obs),
        tasks_worse=sum(o < 0 for o in obs),
        judge_errors=ev.errors,
        candidate_extra={t: v[start_c[t] :] for t, v in ev.cand.items() if len(v) > start_c[t]},
        current_extra={t: v[start_k[t] :] for t, v in ev.cur.items() if len(v) > start_k[t]},
    )


def _paired_tasks(
    cand: dict[str, list[float]], cur: dict[str, list[float]], keep: Optional[int]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Copies of both sides on the tasks both scored; `keep`: the first samples only (1 for a deterministic target,
    whose repeats replay the first)."""
    both = {t: list(v[:keep]) for t, v in cand.items() if v and cur.get(t)}
    return both, {t: list(cur[t][:keep]) for t in both}


def _choose(ev: _Evidence, k: int) -> list[str]:
    """The next tasks to sample, settled ones never and those whose sign is clear only when no other is open: the
    least sampled first (each task is one observation, so the test needs every task's sign, not many pairs of a
    few); among those, where the current skill already has an unpaired sample (a pair for one episode), then where
    pairs disagreed or samples varied; ties in task order."""

    def priority(i_t: tuple[int, str]) -> tuple[int, bool, bool, int]:
        i, t = i_t
        cs, ks = ev.cand[t], ev.cur.get(t, [])
        varied = len(set(cs) | set(ks)) > 1 or any(ev.diffs.get(t) or [])
        cheap = len(ks) > len(cs)
        return (-len(cs), cheap, varied, -i)

    open_ = [(i, t) for i, t in enumerate(ev.cand) if not ev.settled(t)]
    open_ = [it for it in open_ if not ev.clear(it[1])] or open_
    return [t for _, t in sorted(open_, key=priority, reverse=True)[:k]]


def _look(ev: _Evidence, k: int, left: int) -> list[Request]:
    """One look's requests: a pair on each of the next `k` tasks (the candidate alone where the current skill has
    an unpaired sample), within the `left` episodes of the budget (at least one pair)."""
    requests: list[Request] = []
    cost = 0
    for t in _choose(ev, k):
        need = 1 if len(ev.cur[t]) > len(ev.cand[t]) else 2
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
