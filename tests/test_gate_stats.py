"""The statistics module: intervals and paired tests, against values computed by hand or in closed form."""

from __future__ import annotations

import math

import pytest

from skillopt_ray.stats import (
    mean_interval,
    paired_bootstrap,
    paired_test,
    seeds_interval,
    sign_test,
    sign_test_p,
    t975,
    wilson,
)

Z = 1.959963984540054  # the normal's 0.975 quantile


def test_sign_test_is_the_exact_binomial_tail():
    # P(X >= k) for X ~ Bin(m, 1/2): 5 of 5 -> 1/32; 4 of 5 -> (5 + 1)/32; 9 of 10 -> (10 + 1)/1024
    assert sign_test_p(5, 0) == pytest.approx(1 / 32)
    assert sign_test_p(4, 1) == pytest.approx(6 / 32)
    assert sign_test_p(9, 1) == pytest.approx(11 / 1024)
    assert sign_test_p(0, 0) == 1.0  # no task changed: no evidence
    assert sign_test_p(0, 3) == 1.0


def test_sign_test_drops_ties_and_decides_at_alpha():
    t = sign_test([1.0] * 5 + [0.0] * 13, alpha=0.05)  # 5 better, 13 unchanged: p = 1/32 <= 0.05
    assert (t.n, t.n_better, t.n_worse) == (18, 5, 0)
    assert t.p_value == pytest.approx(1 / 32) and t.significant
    assert t.mean_diff == pytest.approx(5 / 18)
    t = sign_test([1.0] * 4 + [0.0] * 14, alpha=0.05)  # 4 of 4: p = 1/16 > 0.05
    assert t.p_value == pytest.approx(1 / 16) and not t.significant
    t = sign_test([1.0] * 6 + [-1.0] * 1, alpha=0.05)  # 6 of 7: p = (7 + 1)/128 = 0.0625
    assert t.p_value == pytest.approx(8 / 128) and not t.significant


def test_wilson_closed_form():
    # k = 0: the upper bound is z^2 / (n + z^2)
    lo, hi = wilson(0, 18)
    assert lo == 0.0 and hi == pytest.approx(Z * Z / (18 + Z * Z))
    # k = n/2: symmetric about 1/2, half width z*sqrt(1/(4n) + z^2/(4n^2)) / (1 + z^2/n)
    lo, hi = wilson(9, 18)
    half = Z * math.sqrt(0.25 / 18 + Z * Z / (4 * 18 * 18)) / (1 + Z * Z / 18)
    assert (lo, hi) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert hi == pytest.approx(0.70969, abs=1e-5)


def test_mean_interval_wilson_for_zero_one_and_t_otherwise():
    iv = mean_interval([1, 0, 1, 1])
    assert iv.method == "wilson" and iv.n == 4 and iv.mean == 0.75
    assert (iv.lo, iv.hi) == pytest.approx(wilson(3, 4))
    # per-task means of repeats: mean 0.5, sd sqrt(0.125/3), t(3) = 3.182, half = 3.182 * sd / 2
    iv = mean_interval([0.5, 0.75, 0.25, 0.5])
    half = 3.182 * math.sqrt(0.125 / 3) / 2
    assert iv.method == "t" and (iv.lo, iv.hi) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert mean_interval([]).n == 0
    clipped = mean_interval([0.5, 1.0, 0.0, 0.5])
    assert clipped.lo == 0.0 and clipped.hi == 1.0  # scores stay in [0, 1]


def test_seeds_interval_is_student_t_unclipped():
    iv = seeds_interval([0.2, 0.4])  # mean 0.3, sd sqrt(0.02), t(1) = 12.706
    half = 12.706 * math.sqrt(0.02) / math.sqrt(2)
    assert (iv.lo, iv.hi) == (pytest.approx(0.3 - half), pytest.approx(0.3 + half))
    assert iv.lo < 0  # not clipped: a spread across seeds, not a score
    assert seeds_interval([0.7]).lo == seeds_interval([0.7]).hi == 0.7
    assert t975(31) == 1.96 and t975(10) == 2.228
    with pytest.raises(ValueError):
        t975(0)


def test_paired_bootstrap_degenerate_cases():
    t = paired_bootstrap([0.5] * 10, alpha=0.05)  # every resample has mean 0.5
    assert t.p_value == 0.0 and t.significant and t.lo == t.hi == 0.5
    t = paired_bootstrap([0.0] * 10, alpha=0.05)  # no change: every resample mean is 0, counted against
    assert t.p_value == 1.0 and not t.significant
    t = paired_bootstrap([-1.0, 0.0, 0.0], alpha=0.05)
    assert not t.significant and t.mean_diff == pytest.approx(-1 / 3)
    t = paired_bootstrap([], alpha=0.05)
    assert t.n == 0 and not t.significant


def test_paired_bootstrap_p_is_the_chance_a_resample_loses_every_improved_task():
    # 2 of 18 tasks improved by 1, 16 unchanged: a resample's mean is <= 0 exactly when it draws neither
    # improved task, probability (16/18)^18 = 0.1199; the bootstrap estimates it within sampling error
    t = paired_bootstrap([1.0, 1.0] + [0.0] * 16, alpha=0.05)
    assert t.p_value == pytest.approx((16 / 18) ** 18, abs=0.025)
    assert not t.significant
    assert t.level == pytest.approx(0.9) and t.lo <= t.mean_diff <= t.hi


def test_paired_bootstrap_is_deterministic():
    diffs = [1.0, -1.0, 0.0, 1.0, 0.5, 0.0, 1.0, -0.5]
    assert paired_bootstrap(diffs, 0.05) == paired_bootstrap(diffs, 0.05)
    assert paired_test("paired_bootstrap", diffs, 0.05) == paired_bootstrap(diffs, 0.05)
    assert paired_test("sign", diffs, 0.05) == sign_test(diffs, 0.05)
    with pytest.raises(ValueError):
        paired_test("t", diffs, 0.05)
