"""The statistics of a comparison: per group mean, std and a 95% t interval over seeds (clipped to each metric's
range), the best configuration on selection, differences to a baseline paired by seed, learning-curve means."""

from __future__ import annotations

import math
from typing import Any, Optional, TypedDict

from skillopt_ray.compare.groups import Record, RunGroups, norm_value

METRICS = [  # (key, column label)
    ("test_hard_best", "test hard"),
    ("test_soft_best", "test soft"),
    ("best_selection_score", "best selection"),
    ("improvement_hard", "test hard gain"),
    ("tokens", "tokens"),
    ("cost_usd", "cost $"),
    ("wall_time_s", "wall s"),
]

# The range each metric can take; confidence intervals are clipped to it.
METRIC_RANGE: dict[str, tuple[float, float]] = {
    "test_hard_best": (0.0, 1.0),
    "test_soft_best": (0.0, 1.0),
    "best_selection_score": (0.0, 1.0),
    "improvement_hard": (-1.0, 1.0),
    "tokens": (0.0, math.inf),
    "cost_usd": (0.0, math.inf),
    "wall_time_s": (0.0, math.inf),
}
SCORE_RANGE = (0.0, 1.0)


class Spread(TypedDict):
    """A metric over a group's runs: n, mean, sample std and its 95% t interval (nan where n < 2)."""

    n: int
    mean: float
    std: float
    ci_lo: float
    ci_hi: float
    clipped: bool  # whether clipping to the metric's range changed the interval


def summarize(values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf)) -> Spread:
    """Mean, sample std and a two-sided 95% t interval (nan where n < 2), clipped to `bounds`
    ("clipped" says whether clipping changed it)."""
    n = len(values)
    out = Spread(n=n, mean=math.nan, std=math.nan, ci_lo=math.nan, ci_hi=math.nan, clipped=False)
    if n == 0:
        return out
    mean = sum(values) / n
    out["mean"] = mean
    if n < 2:
        return out
    from scipy import stats

    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    lo, hi = max(bounds[0], mean - half), min(bounds[1], mean + half)
    out["std"], out["ci_lo"], out["ci_hi"] = std, lo, hi
    out["clipped"] = (lo != mean - half) or (hi != mean + half)
    return out


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if abs(v) < 1e5 else f"{v:.0f}"


class RunStatistics(RunGroups):
    """The numbers of a comparison, per group of runs."""

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for key, recs in self.groups().items():
            row: dict[str, Any] = dict(zip(self.group_by, key))
            row["n"] = len(recs)
            row["seeds"] = " ".join(str(r.seed) for r in recs)
            for m, _label in METRICS:
                st = summarize(
                    [r.metrics[m] for r in recs if not math.isnan(r.metrics.get(m, math.nan))], METRIC_RANGE[m]
                )
                row.update(
                    {
                        f"{m}_mean": st["mean"],
                        f"{m}_std": st["std"],
                        f"{m}_ci_lo": st["ci_lo"],
                        f"{m}_ci_hi": st["ci_hi"],
                        f"{m}_ci_clipped": int(st["clipped"]),
                    }
                )
            rows.append(row)
        return rows

    def best(self) -> Optional[dict[str, Any]]:
        """The group with the highest mean best-selection score (the signal training itself selects on).

        When groups tie on it there is no winner on selection (`params` is None, `winner` False): the tied groups
        are listed in `tied` with their test scores (`tied_test`), which are for reporting, not for choosing."""
        rows = [r for r in self.rows() if not math.isnan(r["best_selection_score_mean"])]
        if not rows:
            return None
        top = max(r["best_selection_score_mean"] for r in rows)
        tied = [r for r in rows if math.isclose(r["best_selection_score_mean"], top, rel_tol=0, abs_tol=1e-9)]
        params = [{k: r[k] for k in self.group_by} for r in tied]
        tied_test = [
            {
                "params": p,
                "test_hard_best_mean": r["test_hard_best_mean"],
                "test_hard_best_std": r["test_hard_best_std"],
            }
            for p, r in zip(params, tied)
        ]
        if len(tied) == 1:
            return {
                "params": params[0],
                "winner": True,
                "tied": params,
                "tied_test": tied_test,
                "rule": "highest mean best selection score",
                **tied[0],
            }
        return {
            "params": None,
            "winner": False,
            "tied": params,
            "tied_test": tied_test,
            "rule": f"no winner on selection: {len(tied)} configurations tie at mean best selection score {_fmt(top)}",
            "best_selection_score_mean": top,
            "test_hard_best_mean": math.nan,
        }

    def best_group(self) -> Optional[dict[str, Any]]:  # kept for callers of the old name
        return self.best()

    def paired(self, baseline: dict[str, str]) -> list[dict[str, Any]]:
        """Per configuration: test-hard difference to the baseline, paired by seed."""
        groups = self.groups()
        base_key = tuple(norm_value(baseline.get(k, "")) for k in self.group_by)
        if base_key not in groups:
            raise ValueError(
                f"baseline {baseline} matches no group; groups: {[dict(zip(self.group_by, k)) for k in groups]}"
            )
        base = {r.seed: r for r in groups[base_key]}
        out = []
        for key, recs in groups.items():
            if key == base_key:
                continue
            diffs = [
                r.metrics["test_hard_best"] - base[r.seed].metrics["test_hard_best"] for r in recs if r.seed in base
            ]
            st = summarize(diffs, (-1.0, 1.0))
            p_value = math.nan
            if len(diffs) >= 2 and st["std"] > 0:
                from scipy import stats

                p_value = float(stats.ttest_1samp(diffs, 0.0).pvalue)
            out.append(
                {
                    **dict(zip(self.group_by, key)),
                    "pairs": len(diffs),
                    "diff_mean": st["mean"],
                    "diff_std": st["std"],
                    "diff_ci_lo": st["ci_lo"],
                    "diff_ci_hi": st["ci_hi"],
                    "diff_ci_clipped": int(st["clipped"]),
                    "p_value": p_value,
                }
            )
        return out

    def within_run(self) -> str:
        """The noise inside one run, beside the spread across seeds: the best skill's test-hard interval over its
        test tasks (each task the mean of its repeats), averaged over the runs that recorded one."""
        hw = [
            r.metrics["test_hard_best_task_halfwidth"]
            for r in self.records
            if "test_hard_best_task_halfwidth" in r.metrics
        ]
        if not hw:
            return ""
        tasks = sorted({int(r.metrics["test_tasks"]) for r in self.records if "test_tasks" in r.metrics})
        return (
            f"Within one run, the best skill's test hard score has a 95% interval of ± {_fmt(sum(hw) / len(hw))} on "
            f"average over its n = {'/'.join(map(str, tasks))} test tasks ({len(hw)} runs); differences between "
            "configurations smaller than that are within one run's noise."
        )

    def curve_stats(self, recs: list[Record], which: str = "current") -> list[dict[str, Any]]:
        """Per step: mean over the group's runs, the 95% t interval clipped to [0, 1], n."""
        steps = sorted({p.step for r in recs for p in r.curve})
        out = []
        for s in steps:
            vals = [getattr(p, which) for r in recs for p in r.curve if p.step == s]
            vals = [v for v in vals if v is not None and not math.isnan(v)]
            st = summarize(vals, SCORE_RANGE)
            out.append({"step": s, **st})
        return out
