"""Compare training runs grouped by their swept parameters: mean, std and 95% CI over seeds, paired
differences against a baseline, learning curves.

    python -m skillopt_ray.compare --sweep-dir outputs/sweeps/<name> [--baseline optimizer.learning_rate=4]
    python -m skillopt_ray.compare --tracking-uri sqlite:///outputs/mlflow.db --experiment alfworld \
        --group-by optimizer.learning_rate,optimizer.gate_metric [--out DIR]

Writes comparison.md, comparison.csv, paired.csv (with a baseline), learning_curves.png and
accept_rate.png, and logs them to the sweep's MLflow parent run when there is one.
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

METRICS = [  # (key, column label)
    ("test_hard_best", "test hard"),
    ("test_soft_best", "test soft"),
    ("best_selection_score", "best selection"),
    ("improvement_hard", "test hard gain"),
    ("tokens", "tokens"),
    ("cost_usd", "cost $"),
    ("wall_time_s", "wall s"),
]


@dataclass
class Record:
    """One training run: its swept values, seed, final metrics and per-step curve."""

    params: dict[str, str]
    seed: int
    metrics: dict[str, float]
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (step, selection score, accepted 0/1)


def summarize(values: list[float]) -> dict[str, float]:
    """Mean, sample std and a two-sided 95% t interval (nan where n < 2)."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": math.nan, "std": math.nan, "ci_lo": math.nan, "ci_hi": math.nan}
    mean = sum(values) / n
    if n < 2:
        return {"n": n, "mean": mean, "std": math.nan, "ci_lo": math.nan, "ci_hi": math.nan}
    from scipy import stats

    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    return {"n": n, "mean": mean, "std": std, "ci_lo": mean - half, "ci_hi": mean + half}


def _fmt(v: float, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if abs(v) < 1e5 else f"{v:.0f}"


def record_from_run_dir(params: dict[str, Any], seed: int, run_dir: Path) -> Record:
    s = json.loads((run_dir / "summary.json").read_text())
    history = json.loads((run_dir / "history.json").read_text()) if (run_dir / "history.json").exists() else []
    metrics = {
        "test_hard_best": s["test"]["best"]["hard"], "test_soft_best": s["test"]["best"]["soft"],
        "test_hard_initial": s["test"]["initial"]["hard"], "best_selection_score": s["selection"]["best"],
        "improvement_hard": s["test"]["best"]["hard"] - s["test"]["initial"]["hard"],
        "tokens": float(s["tokens"].get("tokens", 0)), "cost_usd": float(s["tokens"].get("cost_usd", 0.0)),
        "wall_time_s": float(s.get("wall_time_s", 0.0)),
    }
    curve = [(0, float(s["selection"]["initial"]), 0.0)]
    curve += [(h["step"], float(h["current_score"]), 1.0 if h["action"].startswith("accept") else 0.0) for h in history]
    return Record({k: str(v) for k, v in params.items()}, int(seed), metrics, curve)


def records_from_mlflow(tracking_uri: str, experiment: Optional[str], parent_run_id: Optional[str], group_by: list[str]) -> list[Record]:
    """Finished runs of an experiment (or the children of a sweep's parent run)."""
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
    runs = client.search_runs(exp_ids, filter_string=query, max_results=5000)
    records = []
    for run in runs:
        m, tags, params = run.data.metrics, run.data.tags, run.data.params
        if run.info.status != "FINISHED" or "test_hard_best" not in m:
            continue
        values = {k: tags.get(f"sweep.param.{k}", params.get(k, "?")) for k in group_by}
        history = {name: {x.step: x.value for x in client.get_metric_history(run.info.run_id, name)}
                   for name in ("current_score", "accepted", "selection_score")}
        steps = sorted(history["current_score"])
        curve = [(0, history["selection_score"].get(0, math.nan), 0.0)]
        curve += [(s, history["current_score"][s], history["accepted"].get(s, 0.0)) for s in steps]
        records.append(Record(values, int(tags.get("seed", params.get("seed", "0"))), {
            "test_hard_best": m["test_hard_best"], "test_soft_best": m.get("test_soft_best", math.nan),
            "test_hard_initial": m.get("test_hard_initial", math.nan), "best_selection_score": m.get("best_selection_score", math.nan),
            "improvement_hard": m["test_hard_best"] - m.get("test_hard_initial", math.nan),
            "tokens": m.get("tokens_total", math.nan), "cost_usd": m.get("cost_usd_total", math.nan), "wall_time_s": m.get("wall_time_s", math.nan),
        }, curve))
    return records


class Comparison:
    def __init__(self, records: list[Record], group_by: list[str]):
        self.records = records
        self.group_by = group_by

    @staticmethod
    def from_run_dirs(items: list[tuple[dict[str, Any], int, Path]], group_by: list[str]) -> "Comparison":
        return Comparison([record_from_run_dir(p, s, d) for p, s, d in items], group_by)

    def groups(self) -> dict[tuple[str, ...], list[Record]]:
        out: dict[tuple[str, ...], list[Record]] = {}
        for r in sorted(self.records, key=lambda r: ([r.params.get(k, "") for k in self.group_by], r.seed)):
            out.setdefault(tuple(r.params.get(k, "") for k in self.group_by), []).append(r)
        return out

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for key, recs in self.groups().items():
            row: dict[str, Any] = dict(zip(self.group_by, key))
            row["n"] = len(recs)
            row["seeds"] = " ".join(str(r.seed) for r in recs)
            for m, _label in METRICS:
                st = summarize([r.metrics[m] for r in recs if not math.isnan(r.metrics.get(m, math.nan))])
                row.update({f"{m}_mean": st["mean"], f"{m}_std": st["std"], f"{m}_ci_lo": st["ci_lo"], f"{m}_ci_hi": st["ci_hi"]})
            rows.append(row)
        return rows

    def best_group(self) -> Optional[dict[str, Any]]:
        """Highest mean best-selection score (the signal training itself selects on), then fewer tokens."""
        rows = self.rows()
        if not rows:
            return None
        best = max(rows, key=lambda r: (r["best_selection_score_mean"], -(r["tokens_mean"] or 0)))
        return {"params": {k: best[k] for k in self.group_by}, **best}

    def paired(self, baseline: dict[str, str]) -> list[dict[str, Any]]:
        """Per configuration: test-hard difference to the baseline, paired by seed."""
        groups = self.groups()
        base_key = tuple(baseline.get(k, "") for k in self.group_by)
        if base_key not in groups:
            raise ValueError(f"baseline {baseline} matches no group; groups: {[dict(zip(self.group_by, k)) for k in groups]}")
        base = {r.seed: r for r in groups[base_key]}
        out = []
        for key, recs in groups.items():
            if key == base_key:
                continue
            diffs = [r.metrics["test_hard_best"] - base[r.seed].metrics["test_hard_best"] for r in recs if r.seed in base]
            st = summarize(diffs)
            p_value = math.nan
            if len(diffs) >= 2 and st["std"] > 0:
                from scipy import stats

                p_value = float(stats.ttest_1samp(diffs, 0.0).pvalue)
            out.append({**dict(zip(self.group_by, key)), "pairs": len(diffs), "diff_mean": st["mean"], "diff_std": st["std"],
                        "diff_ci_lo": st["ci_lo"], "diff_ci_hi": st["ci_hi"], "p_value": p_value})
        return out

    def markdown(self, baseline: Optional[dict[str, str]] = None) -> str:
        head = self.group_by + ["n"] + [label for _m, label in METRICS]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in self.rows():
            cells = [str(row[k]) for k in self.group_by] + [str(row["n"])]
            for m, _label in METRICS:
                digits = 0 if m in ("tokens", "wall_time_s") else 3
                mean, lo, hi = row[f"{m}_mean"], row[f"{m}_ci_lo"], row[f"{m}_ci_hi"]
                ci = f" [{_fmt(lo, digits)}, {_fmt(hi, digits)}]" if not math.isnan(lo) else ""
                cells.append(f"{_fmt(mean, digits)} ± {_fmt(row[f'{m}_std'], digits)}{ci}")
            lines.append("| " + " | ".join(cells) + " |")
        text = "Mean ± std over seeds [95% t interval].\n\n" + "\n".join(lines)
        if baseline:
            pl = ["| " + " | ".join(self.group_by + ["pairs", "test hard diff vs baseline", "95% CI", "p"]) + " |",
                  "|" + "---|" * (len(self.group_by) + 4)]
            for p in self.paired(baseline):
                pl.append("| " + " | ".join([str(p[k]) for k in self.group_by] + [str(p["pairs"]), _fmt(p["diff_mean"]),
                          f"[{_fmt(p['diff_ci_lo'])}, {_fmt(p['diff_ci_hi'])}]", _fmt(p["p_value"])]) + " |")
            text += f"\n\nPaired by seed against the baseline {baseline}:\n\n" + "\n".join(pl)
        return text

    def plot(self, out_dir: Path) -> list[Path]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        paths = []
        fig, ax = plt.subplots(figsize=(7, 4.5))
        fig2, ax2 = plt.subplots(figsize=(7, 4.5))
        for key, recs in self.groups().items():
            label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(self.group_by, key)) or "all"
            steps = sorted({s for r in recs for s, _, _ in r.curve})
            per_step = [[v for r in recs for s2, v, _ in r.curve if s2 == s and not math.isnan(v)] for s in steps]
            means = [sum(v) / len(v) if v else math.nan for v in per_step]
            line = ax.plot(steps, means, marker="o", label=f"{label} (n={len(recs)})")[0]
            ax.fill_between(steps, [min(v) if v else math.nan for v in per_step], [max(v) if v else math.nan for v in per_step],
                            color=line.get_color(), alpha=0.2)
            acc_steps = [s for s in steps if s > 0]
            rates = [sum(a for r in recs for s2, _, a in r.curve if s2 == s) / max(1, sum(1 for r in recs for s2, _, _ in r.curve if s2 == s))
                     for s in acc_steps]
            ax2.plot(acc_steps, rates, marker="s", label=label)
        ax.set(xlabel="step", ylabel="selection score (current skill)", title="Learning curves: mean over seeds, band = min..max")
        ax2.set(xlabel="step", ylabel="fraction of seeds accepting", ylim=(-0.05, 1.05), title="Accepted (1) vs rejected/skipped (0) steps")
        for a, f, name in ((ax, fig, "learning_curves.png"), (ax2, fig2, "accept_rate.png")):
            a.grid(alpha=0.3)
            a.legend(fontsize=8)
            f.tight_layout()
            f.savefig(out_dir / name, dpi=110)
            plt.close(f)
            paths.append(out_dir / name)
        return paths

    def write(self, out_dir: Path, baseline: Optional[dict[str, str]] = None) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
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


def parse_baseline(text: Optional[str]) -> Optional[dict[str, str]]:
    if not text:
        return None
    pairs = [p.split("=", 1) for p in text.split(",") if p]
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"--baseline must look like key=value[,key=value], got {text!r}")
    return {k.strip(): v.strip() for k, v in pairs}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m skillopt_ray.compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep-dir", help="a sweep directory (outputs/sweeps/<name>): its MLflow parent run's children")
    ap.add_argument("--tracking-uri", help="MLflow tracking URI (default: the sweep's, else sqlite:///outputs/mlflow.db)")
    ap.add_argument("--experiment", help="MLflow experiment name (without --sweep-dir)")
    ap.add_argument("--group-by", default="", help="comma-separated config keys (default: the sweep's swept keys)")
    ap.add_argument("--baseline", help="key=value[,key=value]: the configuration others are paired against, by seed")
    ap.add_argument("--out", help="output folder (default: <sweep-dir>/comparison or ./comparison)")
    a = ap.parse_args(argv)
    try:
        baseline = parse_baseline(a.baseline)
        parent = None
        group_by = [k for k in a.group_by.split(",") if k]
        uri = a.tracking_uri
        if a.sweep_dir:
            meta_path = Path(a.sweep_dir) / "sweep.json"
            if not meta_path.is_file():
                raise ValueError(f"{meta_path} not found: --sweep-dir must be a folder made by python -m skillopt_ray.sweep")
            meta = json.loads(meta_path.read_text())
            parent, uri = meta["parent_run_id"], uri or meta["tracking_uri"]
            group_by = group_by or sorted(meta["grid"])
            if not parent:
                raise ValueError("this sweep ran without MLflow (tracking=none); nothing to read")
        elif not a.experiment:
            raise ValueError("give --sweep-dir, or --experiment (with --tracking-uri)")
        uri = uri or f"sqlite:///{Path('outputs').resolve() / 'mlflow.db'}"
        records = records_from_mlflow(uri, a.experiment, parent, group_by)
        if not records:
            raise ValueError("no finished runs found to compare")
        out = Path(a.out) if a.out else (Path(a.sweep_dir) / "comparison" if a.sweep_dir else Path("comparison"))
        comp = Comparison(records, group_by)
        files = comp.write(out, baseline)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if parent:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        for f in files:
            client.log_artifact(parent, str(f), "comparison")
    print(comp.markdown(baseline))
    print(f"written: {', '.join(str(f) for f in files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
