"""The statistics behind noisy decisions: intervals on scores, and the paired tests the gate may use.

Pure functions on lists of floats, no global state. The bootstrap draws from its own `random.Random(seed)`, so
the same differences always give the same decision (a resumed run decides exactly as the uninterrupted one).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Optional, TypedDict

GATE_TESTS = ("none", "paired_bootstrap", "sign")
BOOTSTRAP_SEED = 0  # fixed: a decision depends on the scores alone
BOOTSTRAP_RESAMPLES = 2000

# two-sided 95% Student-t quantiles (the 0.975 quantile) by degrees of freedom; beyond 30, the normal's 1.96
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


class IntervalDict(TypedDict):
    """An Interval as files keep it (summary.json's intervals)."""

    mean: float
    lo: float
    hi: float
    n: int
    level: float
    method: str


@dataclass(frozen=True)
class Interval:
    """A mean with its interval: `n` values went into it, `method` says how the bounds were computed."""

    mean: float
    lo: float
    hi: float
    n: int
    level: float = 0.95
    method: str = ""

    def to_dict(self) -> IntervalDict:
        return IntervalDict(mean=self.mean, lo=self.lo, hi=self.hi, n=self.n, level=self.level, method=self.method)

    def text(self, digits: int = 3) -> str:
        """'0.556 [0.337, 0.754] n=18' — how the report and the comparison print a score."""
        return f"{self.mean:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}] n={self.n}"


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (table up to 30, normal beyond)."""
    if df < 1:
        raise ValueError("t975 needs at least one degree of freedom")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def wilson(k: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n: sensible at 0/n and n/n, where the normal one collapses."""
    if n <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(
    values: Sequence[float], level: float = 0.95, bounds: Optional[tuple[float, float]] = (0.0, 1.0)
) -> Interval:
    """95% interval of the mean of per-task scores: Wilson when every value is 0 or 1 (one episode per task,
    hard score), else Student's t on the values (per-task means of repeats, soft scores), clipped to `bounds`."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return Interval(0.0, 0.0, 0.0, 0, level, "empty")
    mean = sum(xs) / n
    if all(v in (0.0, 1.0) for v in xs):
        lo, hi = wilson(sum(xs), n, level)
        return Interval(mean, lo, hi, n, level, "wilson")
    return _t_interval(xs, mean, level, bounds)


def seeds_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """95% interval of a mean across seeds (independent runs): Student's t, unclipped."""
    xs = [float(v) for v in values]
    if not xs:
        return Interval(0.0, 0.0, 0.0, 0, level, "empty")
    return _t_interval(xs, sum(xs) / len(xs), level, None)


def _t_interval(xs: list[float], mean: float, level: float, bounds: Optional[tuple[float, float]]) -> Interval:
    n = len(xs)
    if n < 2:
        return Interval(mean, mean, mean, n, level, "t")
    if level != 0.95:
        raise ValueError("the t interval is tabulated for level 0.95 only")
    sd = math.sqrt(sum((v - mean) ** 2 for v in xs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    if bounds is not None:
        lo, hi = max(bounds[0], lo), min(bounds[1], hi)
    return Interval(mean, lo, hi, n, level, "t")


def diff_interval(diffs: Sequence[float], level: float = 0.95) -> Interval:
    """95% interval of a mean paired difference (per-task candidate minus current): Student's t, within [-1, 1]."""
    xs = [float(v) for v in diffs]
    if not xs:
        return Interval(0.0, 0.0, 0.0, 0, level, "empty")
    return _t_interval(xs, sum(xs) / len(xs), level, (-1.0, 1.0))


class PairedTestDict(TypedDict):
    """A PairedTest as a gate record holds it (`gate_test`)."""

    test: str
    alpha: float
    n: int
    mean_diff: float
    lo: float
    hi: float
    level: float
    p_value: float
    significant: bool
    n_better: int
    n_worse: int


class GateTestDict(PairedTestDict, total=False):
    """A gate record's `gate_test`: the paired test's keys, plus what the sequential gate adds (its looks, its
    boundaries and the extra samples it played)."""

    net: float
    discordant: int
    pairs: int
    looks: int
    episodes: int
    first_pass: int
    accept_at: float
    reject_at: float
    final_at: float
    stopped: str
    task_p: float
    tasks_better: int
    tasks_worse: int
    judge_errors: int
    n_tasks: int
    candidate_extra: dict[str, list[float]]
    current_extra: dict[str, list[float]]
    # every extra sample of both skills after this gate, and the current skill's evaluation key (SequentialSamples)
    current_eval: str
    candidate_samples: dict[str, list[float]]
    current_samples: dict[str, list[float]]


class SequentialSamples(TypedDict):
    """The samples a sequential gate leaves for later gates (and a resumed run) in its `gate_test`."""

    current_eval: str
    candidate_samples: dict[str, list[float]]
    current_samples: dict[str, list[float]]


@dataclass(frozen=True)
class PairedTest:
    """A one-sided test that the candidate improves on the current skill, on per-task paired differences
    (candidate minus current). `lo`/`hi` bound the mean difference at level `level`; `significant` is the
    verdict at `alpha`."""

    test: str
    alpha: float
    n: int
    mean_diff: float
    lo: float
    hi: float
    level: float
    p_value: float
    significant: bool
    n_better: int
    n_worse: int

    def to_dict(self) -> GateTestDict:
        """The test as a gate record holds it, keys in field order."""
        return GateTestDict(
            test=self.test,
            alpha=self.alpha,
            n=self.n,
            mean_diff=self.mean_diff,
            lo=self.lo,
            hi=self.hi,
            level=self.level,
            p_value=self.p_value,
            significant=self.significant,
            n_better=self.n_better,
            n_worse=self.n_worse,
        )


def _counts(diffs: Sequence[float]) -> tuple[int, int]:
    return sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)


def sign_test_p(n_better: int, n_worse: int) -> float:
    """Exact one-sided sign test: P(X >= n_better) for X ~ Binomial(n_better + n_worse, 1/2); ties are dropped."""
    m = n_better + n_worse
    if m == 0:
        return 1.0
    return sum(math.comb(m, k) for k in range(n_better, m + 1)) / 2**m


def bootstrap_means(
    diffs: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> list[float]:
    """Means of `resamples` resamples (with replacement, over tasks) of the differences, sorted."""
    xs = list(diffs)
    n = len(xs)
    rng = random.Random(seed)
    return sorted(sum(rng.choices(xs, k=n)) / n for _ in range(resamples))


def _quantile(sorted_xs: list[float], q: float) -> float:
    """The q-quantile of sorted values, linear between order statistics."""
    pos = q * (len(sorted_xs) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(sorted_xs) - 1)
    return sorted_xs[i] + (sorted_xs[j] - sorted_xs[i]) * (pos - i)


def paired_bootstrap(
    diffs: Sequence[float], alpha: float, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> PairedTest:
    """Percentile bootstrap over tasks. p is the share of resampled means at or below zero (a resample with no
    improvement counts against the candidate); significant when p <= alpha and the observed mean is positive.
    The interval is the two-sided 1-2·alpha percentile interval, so its lower end is the one-sided bound."""
    n = len(diffs)
    better, worse = _counts(diffs)
    if n == 0:
        return PairedTest("paired_bootstrap", alpha, 0, 0.0, 0.0, 0.0, 1 - 2 * alpha, 1.0, False, 0, 0)
    mean = sum(diffs) / n
    means = bootstrap_means(diffs, resamples, seed)
    p = sum(m <= 0 for m in means) / len(means)
    lo, hi = _quantile(means, alpha), _quantile(means, 1 - alpha)
    return PairedTest(
        "paired_bootstrap", alpha, n, mean, lo, hi, 1 - 2 * alpha, p, mean > 0 and p <= alpha, better, worse
    )


def sign_test(diffs: Sequence[float], alpha: float) -> PairedTest:
    """Exact sign test on the tasks whose score changed; the interval is the bootstrap's, for display only."""
    n = len(diffs)
    better, worse = _counts(diffs)
    p = sign_test_p(better, worse)
    mean = sum(diffs) / n if n else 0.0
    boot = paired_bootstrap(diffs, alpha) if n else None
    lo, hi = (boot.lo, boot.hi) if boot else (0.0, 0.0)
    return PairedTest("sign", alpha, n, mean, lo, hi, 1 - 2 * alpha, p, mean > 0 and p <= alpha, better, worse)


def paired_test(test: str, diffs: Sequence[float], alpha: float) -> PairedTest:
    """The gate's test by name ('paired_bootstrap' or 'sign')."""
    if test == "paired_bootstrap":
        return paired_bootstrap(diffs, alpha)
    if test == "sign":
        return sign_test(diffs, alpha)
    raise ValueError(f"unknown paired test {test!r}; use one of {', '.join(GATE_TESTS[1:])}")
