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
import sys
from pathlib import Path
from typing import Optional

from skillopt_ray.compare.groups import Point, Record, RunGroups, norm_value
from skillopt_ray.compare.records import (
    read_steps,
    read_sweep_meta,
    record_from_run_dir,
    records_from_mlflow,
    run_finished,
    sweep_records,
)
from skillopt_ray.compare.render import OUTPUT_FILES, Comparison, sweep_comparison
from skillopt_ray.compare.stats import METRIC_RANGE, METRICS, SCORE_RANGE, RunStatistics, summarize
from skillopt_ray.runs.records import RecordError

__all__ = [
    "METRICS",
    "METRIC_RANGE",
    "OUTPUT_FILES",
    "SCORE_RANGE",
    "Comparison",
    "Point",
    "Record",
    "RunGroups",
    "RunStatistics",
    "main",
    "norm_value",
    "parse_baseline",
    "read_steps",
    "record_from_run_dir",
    "records_from_mlflow",
    "run_finished",
    "summarize",
    "sweep_comparison",
    "sweep_records",
]


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
            meta = read_sweep_meta(sdir)
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
