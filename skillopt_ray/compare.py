"""Compare training runs grouped by their swept parameters: mean, std and 95% CI over seeds, paired
differences against a baseline, learning curves.

    python -m skillopt_ray.compare --sweep-dir outputs/sweeps/<name> [--baseline optimizer.learning_rate=4] [--out DIR] [--force]
    python -m skillopt_ray.compare --tracking-uri sqlite:///outputs/mlflow.db --experiment alfworld \
        --group-by optimizer.learning_rate,optimizer.gate_metric [--out DIR]

One source of truth: for a sweep, the records come from the trials listed in the sweep's sweep.json
(one record per run directory, read from the run directory itself), through `sweep_comparison`, the
same function the sweep uses for its own comparison/ folder; so both count the same runs. Swept
values are normalised (4, 4.0 and "4.0" are one group).

Writes comparison.md, comparison.csv, paired.csv (with a baseline), learning_curves.png and
accept_rate.png. By default into <sweep-dir>/compare (never into the sweep's own comparison/), and
it refuses to write into a folder that already holds comparison files unless --force is given.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.records import RecordError
from skillopt_ray.rundir import RunDir

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
OUTPUT_FILES = ("comparison.md", "comparison.csv", "paired.csv", "learning_curves.png", "accept_rate.png")


def norm_value(value: Any) -> str:
    """One spelling per value, so 4, 4.0 and "4.0" group together: integral numbers without a
    decimal point, other numbers in Python's shortest float form, booleans and null in lower case."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        f = float(value)
        if math.isfinite(f) and f.is_integer() and abs(f) < 1e15:
            return str(int(f))
        return repr(f)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(norm_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return json.dumps({str(k): norm_value(v) for k, v in sorted(value.items())}, sort_keys=True)
    text = str(value).strip()
    low = text.lower()
    if low in ("true", "false", "null", "none"):
        return {"none": "null"}.get(low, low)
    try:
        return norm_value(float(text)) if text and not text.lower().startswith(("nan", "inf", "-inf", "+inf")) else text
    except ValueError:
        return text


@dataclass
class Point:
    """One step of a run's learning curve, as the run recorded it."""

    step: int
    epoch: Optional[int]
    current: float  # selection score of the skill the run held after this step
    candidate: float = math.nan  # the step's candidate at the gate (nan: no candidate)
    accepted: Optional[float] = None  # 1 accepted, 0 rejected/skipped, None for step 0


@dataclass
class Record:
    """One training run: its swept values, seed, final metrics and per-step curve."""

    params: dict[str, str]
    seed: int
    metrics: dict[str, float]
    curve: list[Point] = field(default_factory=list)
    run_dir: Optional[str] = None
    test: dict[str, float] = field(default_factory=dict)  # test hard of the initial / best / final skill

    def __post_init__(self) -> None:
        self.params = {k: norm_value(v) for k, v in self.params.items()}


def summarize(values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf)) -> dict[str, Any]:
    """Mean, sample std and a two-sided 95% t interval (nan where n < 2), clipped to `bounds`
    ("clipped" says whether clipping changed it)."""
    n = len(values)
    out: dict[str, Any] = {
        "n": n,
        "mean": math.nan,
        "std": math.nan,
        "ci_lo": math.nan,
        "ci_hi": math.nan,
        "clipped": False,
    }
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
    out.update(std=std, ci_lo=lo, ci_hi=hi, clipped=(lo != mean - half) or (hi != mean + half))
    return out


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if abs(v) < 1e5 else f"{v:.0f}"


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def run_finished(run_dir: Path) -> bool:
    return RunDir(run_dir).finished()


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    """A run's step records so far, one per step in step order, as written (RunDir's one history reader)."""
    return RunDir(run_dir).history_rows()


def record_from_run_dir(params: dict[str, Any], seed: int, run_dir: Path) -> Record:
    rd = RunDir(run_dir)
    s = rd.read_summary()
    if s is None or not s.test or s.selection is None:
        raise RecordError(f"{rd.summary_path} holds no training summary; the run has not finished")
    tokens = s.tokens or {}
    metrics = {
        "test_hard_best": s.test["best"]["hard"],
        "test_soft_best": s.test["best"]["soft"],
        "test_hard_initial": s.test["initial"]["hard"],
        "best_selection_score": s.selection["best"],
        "improvement_hard": s.test["best"]["hard"] - s.test["initial"]["hard"],
        "tokens": float(tokens.get("tokens", 0)),
        "cost_usd": float(tokens.get("cost_usd", 0.0)),
        "wall_time_s": _run_wall_s(rd, float(s.wall_time_s or 0.0)),
    }
    iv = s.interval("test", "best")  # the run's own 95% interval over its test tasks (runs since intervals exist)
    if iv is not None:
        metrics["test_hard_best_task_halfwidth"] = (float(iv["hi"]) - float(iv["lo"])) / 2
        metrics["test_tasks"] = float(iv["n"])
    curve = [Point(0, 1, _num(s.selection["initial"]))]
    for h in rd.history():
        curve.append(
            Point(
                h.step,
                h.epoch,
                _num(h.current_score),
                _num(h.candidate_gate_score),
                1.0 if h.accepted else 0.0,
            )
        )
    test: dict[str, float] = {k: float(s.test[k]["hard"]) for k in ("initial", "best", "final") if k in s.test}
    return Record(dict(params), int(seed), metrics, curve, str(run_dir), test)


def _run_wall_s(rd: RunDir, loop_s: float) -> float:
    """A run's wall time: every command's on its directory (start-up, Ray, actors, the loop, the final tests), as
    sessions.json keeps it; the training loop's own time only for runs from before it was kept."""
    sessions = rd.read_sessions()
    total = sum(float(x.get("wall_s") or 0.0) for x in sessions)
    return total if sessions and total > 0 else loop_s


def _lookup(metrics: dict[str, float], name: str) -> float:
    """A metric by name, also when the tracker logs it under a prefix (score/..., tokens/...)."""
    if name in metrics:
        return metrics[name]
    for k, v in metrics.items():
        if k.rsplit("/", 1)[-1] == name:
            return v
    return math.nan


def _history(client: Any, run_id: str, names: list[str]) -> dict[str, dict[int, float]]:
    from skillopt_ray.tracking import metric_key

    out: dict[str, dict[int, float]] = {}
    for name in names:
        out[name] = {}
        for candidate in (
            metric_key(name),
            name,
        ):  # the grouped name (score/..., counts/...), then a flat one from older runs
            hist = client.get_metric_history(run_id, candidate)
            if hist:
                out[name] = {x.step: x.value for x in hist}
                break
    return out


def _record_from_mlflow_run(client: Any, run: Any, values: dict[str, Any], seed: int) -> Record:
    m = run.data.metrics
    run_dir = run.data.tags.get("run_dir")
    if run_dir and run_finished(Path(run_dir)):  # the run directory is the source of truth when it is here
        return record_from_run_dir(values, seed, Path(run_dir))
    h = _history(client, run.info.run_id, ["current_score", "candidate_gate_score", "accepted"])
    initial_score = h["current_score"].get(0)  # step 0 of current_score: the initial skill's score
    for legacy in ("score/selection_score", "selection_score"):  # runs logged before it had that key
        if initial_score is None:
            initial_score = {x.step: x.value for x in client.get_metric_history(run.info.run_id, legacy)}.get(0)
    curve = [Point(0, None, math.nan if initial_score is None else initial_score)]
    curve += [
        Point(s, None, v, h["candidate_gate_score"].get(s, math.nan), h["accepted"].get(s, 0.0))
        for s, v in sorted(h["current_score"].items())
        if s > 0
    ]
    best, initial = _lookup(m, "test_hard_best"), _lookup(m, "test_hard_initial")
    return Record(
        values,
        seed,
        {
            "test_hard_best": best,
            "test_soft_best": _lookup(m, "test_soft_best"),
            "test_hard_initial": initial,
            "best_selection_score": _lookup(m, "best_selection_score"),
            "improvement_hard": best - initial,
            "tokens": _lookup(m, "tokens_total"),
            "cost_usd": _lookup(m, "cost_usd_total"),
            # the run's own span (it starts with its first command), else the loop's time it logged
            "wall_time_s": (run.info.end_time - run.info.start_time) / 1000
            if run.info.end_time and run.info.start_time
            else _lookup(m, "wall_time_s"),
        },
        curve,
        run_dir,
        {"initial": initial, "best": best, "final": _lookup(m, "test_hard_final")},
    )


def records_from_mlflow(
    tracking_uri: str, experiment: Optional[str], parent_run_id: Optional[str], group_by: list[str]
) -> list[Record]:
    """Finished runs of an experiment (or the children of a sweep's parent run), one per run directory."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    if parent_run_id:
        exp_ids = [client.get_run(parent_run_id).info.experiment_id]
        query = f"tags.mlflow.parentRunId = '{parent_run_id}'"
    else:
        exp = client.get_experiment_by_name(experiment or "")
        if exp is None:
            raise ValueError(f"no MLflow experiment named {experiment!r} at {tracking_uri}")
        exp_ids, query = [exp.experiment_id], ""
    runs = client.search_runs(exp_ids, filter_string=query, max_results=5000, order_by=["attributes.end_time DESC"])
    records, seen = [], set()
    for run in runs:
        tags, params = run.data.tags, run.data.params
        if run.info.status != "FINISHED" or math.isnan(_lookup(run.data.metrics, "test_hard_best")):
            continue
        ident = tags.get("run_dir") or run.info.run_id
        if ident in seen:  # the same run directory tracked twice: the latest counts once
            continue
        seen.add(ident)
        values = {k: tags.get(f"sweep.param.{k}", params.get(k, "?")) for k in group_by}
        records.append(_record_from_mlflow_run(client, run, values, int(tags.get("seed", params.get("seed", "0")))))
    return records


def sweep_records(sweep_dir: Path) -> tuple[list[Record], list[str], dict[str, int]]:
    """The finished runs of a sweep, one per run directory, from the trials in its sweep.json.

    This is the one place that decides which runs a sweep's comparison counts; the sweep and
    `compare --sweep-dir` both call it. A run directory missing here (the sweep ran elsewhere) is
    read from the sweep's MLflow child run of that directory."""
    meta = json.loads((sweep_dir / "sweep.json").read_text())
    group_by = list(meta.get("keys") or sorted(meta.get("grid") or {}))
    trials, seen = [], set()
    for t in meta["trials"]:
        if t["run_dir"] in seen:
            continue
        seen.add(t["run_dir"])
        trials.append(t)
    counts = {"trials": len(trials), "finished": 0, "stopped": 0, "unfinished": 0}
    records: list[Record] = []
    remote: dict[str, dict[str, Any]] = {}
    for t in trials:
        rd = Path(t["run_dir"])
        if run_finished(rd):
            records.append(record_from_run_dir(t["params"], t["seed"], rd))
            counts["finished"] += 1
        elif not rd.exists() and t.get("status") == "finished":
            remote[str(rd)] = t
        elif t.get("status") == "stopped":
            counts["stopped"] += 1
        else:
            counts["unfinished"] += 1
    if remote and meta.get("parent_run_id") and meta.get("tracking_uri"):
        from mlflow.tracking import MlflowClient

        client = MlflowClient(meta["tracking_uri"])
        exp = client.get_run(meta["parent_run_id"]).info.experiment_id
        for run in client.search_runs([exp], f"tags.mlflow.parentRunId = '{meta['parent_run_id']}'", max_results=5000):
            t = remote.pop(run.data.tags.get("run_dir", ""), None)
            if t is not None and run.info.status == "FINISHED":
                records.append(_record_from_mlflow_run(client, run, t["params"], t["seed"]))
                counts["finished"] += 1
    counts["unfinished"] += len(remote)
    return records, group_by, counts


def sweep_comparison(sweep_dir: Path) -> Comparison:
    records, group_by, counts = sweep_records(sweep_dir)
    return Comparison(records, group_by, counts)


class Comparison:
    def __init__(self, records: list[Record], group_by: list[str], counts: Optional[dict[str, int]] = None):
        self.records = records
        self.group_by = group_by
        self.counts = counts

    @staticmethod
    def from_run_dirs(items: list[tuple[dict[str, Any], int, Path]], group_by: list[str]) -> Comparison:
        return Comparison([record_from_run_dir(p, s, d) for p, s, d in items], group_by)

    def _key(self, r: Record) -> tuple[str, ...]:
        return tuple(r.params.get(k, "") for k in self.group_by)

    def groups(self) -> dict[tuple[str, ...], list[Record]]:
        def order(key: tuple[str, ...]) -> list[Any]:
            return [(0, float(v), "") if _is_number(v) else (1, 0.0, v) for v in key]

        out: dict[tuple[str, ...], list[Record]] = {}
        for r in sorted(self.records, key=lambda r: (order(self._key(r)), r.seed)):
            out.setdefault(self._key(r), []).append(r)
        return out

    def label(self, key: tuple[str, ...]) -> str:
        return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(self.group_by, key)) or "all"

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

    def markdown(self, baseline: Optional[dict[str, str]] = None) -> str:
        lines, any_clipped = self._table_lines()
        intro = [
            "Mean ± std over seeds [95% t interval, clipped to the metric's range: scores in [0, 1], the test gain in "
            "[-1, 1], tokens, cost and time at 0 or more"
            + ("; * marks a clipped interval" if any_clipped else "")
            + "]. "
            "n counts runs (one per run directory); an interval needs n >= 2."
        ]
        within = self.within_run()
        if within:
            intro.append(within)
        if self.counts:
            c = self.counts
            intro.append(
                f"Runs: {c['finished']} finished of {c['trials']} trials"
                + (f", {c['stopped']} stopped early by the scheduler (not counted)" if c.get("stopped") else "")
                + (f", {c['unfinished']} unfinished (not counted)" if c.get("unfinished") else "")
                + "."
            )
        best = self._best_line()
        if best:
            intro.append(best)
        text = "\n\n".join(intro) + "\n\n" + "\n".join(lines)
        if baseline:
            text += self._paired_markdown(baseline)
        return text

    def _table_lines(self) -> tuple[list[str], bool]:
        """The per-configuration table's lines (mean ± std [interval] per metric) and whether any interval is clipped."""
        head = self.group_by + ["n"] + [label for _m, label in METRICS]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        any_clipped = False
        for row in self.rows():
            cells = [str(row[k]) for k in self.group_by] + [str(row["n"])]
            for m, _label in METRICS:
                digits = 0 if m in ("tokens", "wall_time_s") else 3
                mean, lo, hi = row[f"{m}_mean"], row[f"{m}_ci_lo"], row[f"{m}_ci_hi"]
                mark = "*" if row[f"{m}_ci_clipped"] else ""
                any_clipped |= bool(mark)
                ci = f" [{_fmt(lo, digits)}, {_fmt(hi, digits)}]{mark}" if not math.isnan(lo) else ""
                cells.append(f"{_fmt(mean, digits)} ± {_fmt(row[f'{m}_std'], digits)}{ci}")
            lines.append("| " + " | ".join(cells) + " |")
        return lines, any_clipped

    def _best_line(self) -> str:
        """The best configuration in a sentence, or the tie and the tied configurations' test scores ("" if none)."""
        best = self.best()
        if best is not None and best["winner"]:
            return f"Best configuration: {_params_text(best['params'])} ({best['rule']})."
        if best is not None:
            tests = "; ".join(
                f"{_params_text(t['params'])}: {_fmt(t['test_hard_best_mean'])}"
                + ("" if math.isnan(t["test_hard_best_std"]) else f" ± {_fmt(t['test_hard_best_std'])}")
                for t in best["tied_test"]
            )
            return (
                f"Best configuration: none, {best['rule']}. Their test hard scores (for reporting, not for "
                f"choosing): {tests}."
            )
        return ""

    def _paired_markdown(self, baseline: dict[str, str]) -> str:
        """The table of test-hard differences to the baseline, paired by seed, with its heading."""
        pl = [
            "| " + " | ".join(self.group_by + ["pairs", "test hard diff vs baseline", "95% CI", "p"]) + " |",
            "|" + "---|" * (len(self.group_by) + 4),
        ]
        for p in self.paired(baseline):
            pl.append(
                "| "
                + " | ".join(
                    [str(p[k]) for k in self.group_by]
                    + [
                        str(p["pairs"]),
                        _fmt(p["diff_mean"]),
                        f"[{_fmt(p['diff_ci_lo'])}, {_fmt(p['diff_ci_hi'])}]" + ("*" if p["diff_ci_clipped"] else ""),
                        _fmt(p["p_value"]),
                    ]
                )
                + " |"
            )
        return (
            f"\n\nPaired by seed against the baseline {baseline} (* marks an interval clipped to [-1, 1]):\n\n"
            + "\n".join(pl)
        )

    # ---- plots ---------------------------------------------------------------------------------

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

    def figures(self) -> dict[str, Any]:
        """The plots as open matplotlib figures (`plot` saves and closes them)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        groups = self.groups()
        count = max(1, len(groups))
        fig, (ax, axt) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [2.2, 1]})
        fig2, ax2 = plt.subplots(figsize=(7, 4.5))
        handles = []
        boundaries: dict[float, set[int]] = {}
        for i, (key, recs) in enumerate(groups.items()):
            dodge = (i - (count - 1) / 2) * 0.08  # overlapping groups side by side
            style = {"marker": MARKERS[i % len(MARKERS)], "ls": STYLES[(i // len(MARKERS) + i) % len(STYLES)]}
            label = f"{self.label(key)} (n={len(recs)})"
            line = self._plot_curves(ax, recs, dodge, style, label)
            handles.append(line)
            _epoch_starts(recs, boundaries)
            _plot_tests(axt, recs, dodge, style, line.get_color())
            _plot_accepts(ax2, recs, dodge, style, line.get_color(), label)
        _mark_epochs((ax, ax2), boundaries)
        _label_axes(ax, axt, ax2, handles)
        for f in (fig, fig2):
            f.tight_layout()
        return {"learning_curves.png": fig, "accept_rate.png": fig2}

    def _plot_curves(self, ax: Any, recs: list[Record], dodge: float, style: dict[str, str], label: str) -> Any:
        """A group's mean selection score per step with its interval band, and its candidates at the gate."""
        mk, ls = style["marker"], style["ls"]
        cur = self.curve_stats(recs, "current")
        xs = [c["step"] + dodge for c in cur]
        line = ax.plot(xs, [c["mean"] for c in cur], marker=mk, linestyle=ls, label=label)[0]
        color = line.get_color()
        ax.fill_between(xs, [c["ci_lo"] for c in cur], [c["ci_hi"] for c in cur], color=color, alpha=0.15, linewidth=0)
        cand = [c for c in self.curve_stats(recs, "candidate") if not math.isnan(c["mean"])]
        if cand:
            ax.plot(
                [c["step"] + dodge for c in cand],
                [c["mean"] for c in cand],
                marker=mk,
                linestyle="none",
                markerfacecolor="none",
                color=color,
                alpha=0.8,
            )
        return line

    def plot(self, out_dir: Path) -> list[Path]:
        import matplotlib.pyplot as plt

        paths = []
        for name, fig in self.figures().items():
            fig.savefig(out_dir / name, dpi=110)
            plt.close(fig)
            paths.append(out_dir / name)
        return paths

    def write(self, out_dir: Path, baseline: Optional[dict[str, str]] = None, force: bool = False) -> list[Path]:
        """Write the comparison files; a folder that already holds them is refused unless `force`."""
        existing = [n for n in OUTPUT_FILES if (out_dir / n).exists()]
        if existing and not force:
            raise FileExistsError(
                f"{out_dir} already holds {', '.join(existing)}; choose another --out or pass --force to replace them"
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        for n in existing:
            (out_dir / n).unlink()
        rows = self.rows()
        files = [out_dir / "comparison.md", out_dir / "comparison.csv"]
        files[0].write_text(self.markdown(baseline) + "\n")
        with open(files[1], "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else self.group_by + ["n"])
            w.writeheader()
            w.writerows(rows)
        if baseline:
            paired = self.paired(baseline)
            files.append(out_dir / "paired.csv")
            with open(files[-1], "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(paired[0]) if paired else self.group_by)
                w.writeheader()
                w.writerows(paired)
        if self.records:
            files += self.plot(out_dir)
        return files


MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">"]
STYLES = ["-", "--", "-.", ":"]
TEST_SKILLS = ("initial", "best", "final")


def _epoch_starts(recs: list[Record], boundaries: dict[float, set[int]]) -> None:
    """Where an epoch starts on the step axis (half a step before its first step), by run."""
    for r in recs:
        prev = None
        for p in r.curve:
            if p.epoch is not None and prev is not None and p.epoch != prev:
                boundaries.setdefault(p.step - 0.5, set()).add(int(p.epoch))
            if p.epoch is not None and p.step > 0:
                prev = p.epoch


def _plot_tests(axt: Any, recs: list[Record], dodge: float, style: dict[str, str], color: Any) -> None:
    """A group's test scores of the initial, best and final skills: means with intervals, joined."""
    mk = style["marker"]
    for j, what in enumerate(TEST_SKILLS):
        vals = [r.test[what] for r in recs if not math.isnan(r.test.get(what, math.nan))]
        st = summarize(vals, SCORE_RANGE)
        if math.isnan(st["mean"]):
            continue
        err = [[st["mean"] - st["ci_lo"]], [st["ci_hi"] - st["mean"]]] if not math.isnan(st["ci_lo"]) else None
        axt.errorbar([j + dodge], [st["mean"]], yerr=err, marker=mk, color=color, capsize=3, linestyle="none")
    means = [_mean([r.test.get(w, math.nan) for r in recs]) for w in TEST_SKILLS]
    tx = [j + dodge for j, m in enumerate(means) if not math.isnan(m)]
    ty = [m for m in means if not math.isnan(m)]
    if tx:
        axt.plot(tx, ty, color=color, linestyle=style["ls"], alpha=0.6)


def _plot_accepts(ax2: Any, recs: list[Record], dodge: float, style: dict[str, str], color: Any, label: str) -> None:
    """A group's fraction of seeds accepting at each step."""
    acc_steps = sorted({p.step for r in recs for p in r.curve if p.accepted is not None})
    rates = [
        _mean([p.accepted for r in recs for p in r.curve if p.step == s and p.accepted is not None]) for s in acc_steps
    ]
    ax2.plot(
        [s + dodge for s in acc_steps], rates, marker=style["marker"], linestyle=style["ls"], color=color, label=label
    )


def _mark_epochs(axes: tuple[Any, ...], boundaries: dict[float, set[int]]) -> None:
    for x, epochs in sorted(boundaries.items()):
        for a in axes:
            a.axvline(x, color="grey", linestyle=":", linewidth=1)
        for a in axes:
            a.text(
                x + 0.04,
                0.02,
                f"epoch {min(epochs)}",
                transform=a.get_xaxis_transform(),
                fontsize=7,
                color="grey",
                va="bottom",
            )


def _label_axes(ax: Any, axt: Any, ax2: Any, handles: list[Any]) -> None:
    """Titles, labels, integer step ticks, legends (the band, the candidate marker and the epoch line explained)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    epoch_line = Line2D([], [], color="grey", linestyle=":", label="epoch start")
    handles = handles + [
        Patch(color="grey", alpha=0.25, label="95% t interval over seeds (clipped to [0, 1])"),
        Line2D(
            [], [], color="grey", marker="o", markerfacecolor="none", linestyle="none", label="candidate at the gate"
        ),
        epoch_line,
    ]
    ax.set(
        xlabel="step", ylabel="selection score", title="Selection score of the current skill per step (mean over seeds)"
    )
    axt.set(ylabel="test hard score", title="Test: initial, best, final skill", ylim=(-0.05, 1.05))
    axt.set_xticks([0, 1, 2], list(TEST_SKILLS))
    ax2.set(
        xlabel="step",
        ylabel="fraction of seeds accepting",
        ylim=(-0.05, 1.05),
        title="Accepted (1) vs rejected/skipped (0) steps",
    )
    for a in (ax, ax2):
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(handles=handles, fontsize=7, loc="best")
    ax2.legend(
        handles=ax2.get_legend_handles_labels()[0] + [Line2D([], [], color="grey", linestyle=":", label="epoch start")],
        fontsize=7,
        loc="best",
    )
    for a in (ax, axt, ax2):
        a.grid(alpha=0.3)


def _mean(values: list[Any]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "(no swept keys)"


def parse_baseline(text: Optional[str]) -> Optional[dict[str, str]]:
    if not text:
        return None
    pairs = [p.split("=", 1) for p in text.split(",") if p]
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"--baseline must look like key=value[,key=value], got {text!r}")
    return {k.strip(): norm_value(v.strip()) for k, v in pairs}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m skillopt_ray.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sweep-dir",
        help="a sweep directory (outputs/sweeps/<name>): the runs of its trials, as the sweep counts them",
    )
    ap.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///outputs/mlflow.db)")
    ap.add_argument("--experiment", help="MLflow experiment name (without --sweep-dir)")
    ap.add_argument("--group-by", default="", help="comma-separated config keys (default: the sweep's swept keys)")
    ap.add_argument("--baseline", help="key=value[,key=value]: the configuration others are paired against, by seed")
    ap.add_argument("--out", help="output folder (default: <sweep-dir>/compare or ./comparison)")
    ap.add_argument("--force", action="store_true", help="replace comparison files already in the output folder")
    a = ap.parse_args(argv)
    parent = uri = None
    try:
        baseline = parse_baseline(a.baseline)
        group_by = [k for k in a.group_by.split(",") if k]
        if a.sweep_dir:
            sdir = Path(a.sweep_dir)
            if not (sdir / "sweep.json").is_file():
                raise ValueError(
                    f"{sdir / 'sweep.json'} not found: --sweep-dir must be a folder made by python -m skillopt_ray.sweep"
                )
            records, swept, counts = sweep_records(sdir)
            comp = Comparison(records, group_by or swept, counts)
            meta = json.loads((sdir / "sweep.json").read_text())
            parent, uri = meta.get("parent_run_id"), meta.get("tracking_uri")
        elif a.experiment:
            uri = a.tracking_uri or f"sqlite:///{Path('outputs').resolve() / 'mlflow.db'}"
            comp = Comparison(records_from_mlflow(uri, a.experiment, None, group_by), group_by)
        else:
            raise ValueError("give --sweep-dir, or --experiment (with --tracking-uri)")
        if not comp.records:
            raise ValueError("no finished runs found to compare")
        out = Path(a.out) if a.out else (Path(a.sweep_dir) / "compare" if a.sweep_dir else Path("comparison"))
        files = comp.write(out, baseline, force=a.force)
    except (ValueError, FileExistsError, RecordError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if parent and uri:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        for f in files:  # beside the sweep's own comparison/ artifacts, never over them
            client.log_artifact(parent, str(f), f"compare/{out.name}")
    print(comp.markdown(baseline))
    print(f"written: {', '.join(str(f) for f in files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
