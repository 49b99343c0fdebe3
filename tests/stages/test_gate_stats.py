"""The statistics module: intervals and paired tests, against values computed by hand or in closed form."""

from __future__ import annotations

import math

import pytest
from skillopt_envs.base import EpisodeContext, EpisodeResult

from skillopt_ray.base.stats import (
    mean_interval,
    paired_bootstrap,
    paired_test,
    seeds_interval,
    sign_test,
    sign_test_p,
    t975,
    wilson,
)
from skillopt_ray.runs.records import ACCEPT_NEW_BEST, REJECT, Evaluation, GateRecord
from skillopt_ray.stages.gate import GatePolicy
from skillopt_ray.stages.reflect import split_minibatches
from skillopt_ray.stages.rollout import repeat_context, summarize

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


# ---------------------------------------------------------------- the gate and the repeats that use them


def _ev(tasks: dict[str, float], repeats: int | None = None) -> Evaluation:
    n = len(tasks)
    return Evaluation(n=n, n_scored=n, hard=sum(tasks.values()) / n, soft=sum(tasks.values()) / n,
                      tasks={t: [v, v] for t, v in tasks.items()}, repeats=repeats)  # fmt: skip


def test_the_default_gate_is_the_strict_improvement_and_writes_no_test():
    policy = GatePolicy()
    cur, cand = _ev({"a": 0, "b": 0, "c": 1}), _ev({"a": 1, "b": 0, "c": 1})
    rec = policy.step_record("k", cand, cur, (2 / 3, 1 / 3, 1 / 3, 3))
    assert rec.action == ACCEPT_NEW_BEST and "gate_test" not in rec.to_dict()
    assert "paired" not in (rec.reason or "")


def test_the_sign_gate_refuses_an_improvement_it_cannot_tell_from_noise():
    policy = GatePolicy(test="sign", alpha=0.05)
    tasks = [f"t{i}" for i in range(18)]
    cur = _ev({t: 0.0 for t in tasks})
    four = _ev({t: float(i < 4) for i, t in enumerate(tasks)})  # 4 better, none worse: p = 1/16
    rec = policy.step_record("k", four, cur, (4 / 18, 0.0, 0.0, 18))
    assert rec.action == REJECT and rec.gate_test is not None
    assert rec.gate_test["p_value"] == pytest.approx(1 / 16) and rec.gate_test["n_better"] == 4
    assert "not significant at alpha=0.05" in (rec.reason or "")
    five = _ev({t: float(i < 5) for i, t in enumerate(tasks)})  # p = 1/32
    rec = policy.step_record("k", five, cur, (5 / 18, 0.0, 0.0, 18))
    assert rec.action == ACCEPT_NEW_BEST and rec.gate_test["significant"]
    assert GateRecord.from_dict(rec.to_dict()).gate_test == rec.gate_test  # gate.json round trip
    assert "significant at alpha=0.05" in (rec.reason or "")
    worse = _ev({t: 0.0 for t in tasks})  # a tie stays a reject, with or without the test
    assert policy.step_record("k", worse, cur, (0.0, 0.0, 0.0, 18)).action == REJECT


def test_the_paired_gate_compares_the_tasks_both_scored():
    policy = GatePolicy(test="paired_bootstrap")
    cur = _ev({"a": 0.0, "b": 1.0, "c": 0.0})
    cand = _ev({"a": 1.0, "c": 1.0, "d": 1.0})  # b was not scored on the candidate's side, d not on the current's
    t = policy.paired_test(cand, cur)
    assert t.n == 2 and t.mean_diff == 1.0


def test_a_repeat_is_its_own_sample_and_a_task_scores_their_mean():
    ctx = EpisodeContext(key="eval/abc", training=False, max_turns=5, history_window=2, seed=42)
    assert repeat_context(ctx, 0) is ctx  # the single rollout's key and seed, as before
    r1, r2 = repeat_context(ctx, 1), repeat_context(ctx, 2)
    assert (r1.key, r2.key) == ("eval/abc/r1", "eval/abc/r2")
    assert len({ctx.seed, r1.seed, r2.seed}) == 3
    res = [
        EpisodeResult("a", "x", hard=1.0, soft=1.0),
        EpisodeResult("a", "x", hard=0.0, soft=0.5),
        EpisodeResult("a", "x", hard=1.0, soft=1.0),
        EpisodeResult("b", "x", hard=0.0, soft=0.0),
        EpisodeResult("b", "x", error="boom", infra_error=True),
        EpisodeResult("b", "x", hard=1.0, soft=1.0),
    ]
    st = summarize(res, 3)
    assert st.tasks == {"a": [pytest.approx(2 / 3), pytest.approx(2.5 / 3)], "b": [0.5, 0.5]}
    assert st.task_repeats == {"a": [[1.0, 1.0], [0.0, 0.5], [1.0, 1.0]], "b": [[0.0, 0.0], [1.0, 1.0]]}
    assert (st.n, st.n_scored, st.repeats) == (6, 5, 3)
    assert "repeats" not in summarize(res[:1]).to_dict()  # a single rollout's record keeps its old keys


def test_the_analysts_see_a_tasks_repeats_together():
    res = [EpisodeResult(t, "x", hard=0.0, info={"repeat": r + 1, "repeats": 3}) for t in "abcd" for r in range(3)]
    fails, wins = split_minibatches(res, 6, batch_seed=7, failure_only=False)
    assert wins == [] and [len(mb) for mb in fails] == [6, 6]
    for mb in fails:
        ids = [r.task_id for r in mb]
        assert ids[:3] == [ids[0]] * 3 and ids[3:] == [ids[3]] * 3
        assert [r.info["repeat"] for r in mb] == [1, 2, 3, 1, 2, 3]
    # and each trajectory says which attempt it is; a single rollout's header is unchanged
    from skillopt_ray.prompts.render import minibatch_text

    traj = [{"role": "assistant", "content": "go"}]
    text = minibatch_text([EpisodeResult("a", "x", hard=0.0, trajectory=traj, info={"repeat": 2, "repeats": 3})])
    assert "Attempt: 2 of 3 independent attempts at this task" in text
    assert "Attempt:" not in minibatch_text([EpisodeResult("a", "x", hard=0.0, trajectory=traj)])


def test_early_stop_counts_a_lost_repeat_as_a_third_of_a_task():
    policy = GatePolicy(early_stop=True, repeats=3)
    cur = _ev({"a": 1.0, "b": 0.0})  # the current skill won 1 of 2 tasks
    stop = policy.certain_reject(cur)
    assert stop is not None
    lose = EpisodeResult("a", "x", hard=0.0)
    assert not stop(lose) and not stop(lose)  # 2/3 of a task lost: the candidate could still reach 4/3 > 1
    assert stop(lose)  # a whole task lost: at most 1, a tie at best


def test_the_report_prints_the_paired_test_and_the_intervals():
    from skillopt_ray.runs.report import interval_text, paired_text

    t = sign_test([1.0] * 5 + [0.0] * 13, 0.05).to_dict()
    line = paired_text(t)
    assert line.startswith("paired test (sign, alpha 0.05): difference 0.2778 [") and "over 18 tasks" in line
    assert line.endswith("p=0.0312: significant")
    assert interval_text(mean_interval([1, 0, 1, 1]).to_dict()).endswith("n=4")
    assert interval_text(None) == "-"


@pytest.mark.parametrize(
    "arg,needle",
    [
        ("optimizer.rollouts_per_task=0", "optimizer.rollouts_per_task=0 is invalid; it must be >= 1"),
        ("optimizer.gate_test=ttest", "allowed: none, paired_bootstrap, sign"),
        ("optimizer.gate_alpha=0.7", "optimizer.gate_alpha=0.7 is invalid"),
    ],
)
def test_bad_noise_options_are_one_line_errors(capsys, arg, needle):
    from skillopt_ray import cli

    code = cli.main(["+experiment=alfworld", arg])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err and needle in err
