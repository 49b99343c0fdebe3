"""What a sweep reports: each step and the end of a trial to Tune, the trial table while it runs, the dry run's
list, sweep.json, the MLflow parent run and its children, the skill diffs and the closing words."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional, TypedDict

from skillopt_ray.base.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from skillopt_ray.base.io import atomic_write_json, atomic_write_text
from skillopt_ray.compare.groups import norm_value
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.runs.records import MlflowRun, StepRecord
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.sweep.spec import SweepSpec
from skillopt_ray.sweep.trials import Trial, TrialRow, _status

METRIC = "selection_score"  # what a scheduler compares: the current skill's selection score after each step
REPORT_COLUMNS = {
    "step": "step",
    "selection_score": "selection",
    "candidate_score": "candidate",
    "best_selection_score": "best selection",
    "test_hard_best": "test hard",
}


class TrialReport(TypedDict, total=False):
    """What a trial tells Tune: after each step, and (finished=1, with the test scores) at the run's end."""

    step: int
    epoch: int
    selection_score: float  # METRIC
    candidate_score: float
    best_selection_score: float
    accepted: int
    action: str
    finished: int
    trial: str
    run_dir: str
    test_hard_best: float
    test_soft_best: float


def _score(v: Optional[float]) -> float:
    return math.nan if v is None else float(v)


def step_report(h: StepRecord, key: str, run_dir: Path) -> TrialReport:
    """What a trial tells Tune after one training step (the step's record in the run's history)."""
    cand = h.candidate_gate_score
    return TrialReport(
        step=h.step,
        epoch=h.epoch,
        selection_score=_score(h.current_score),
        candidate_score=float(cand) if cand is not None else math.nan,
        best_selection_score=_score(h.best_score),
        accepted=1 if h.accepted else 0,
        action=h.action,
        finished=0,
        trial=key,
        run_dir=str(run_dir),
    )


def final_report(run_dir: Path, key: str, last: Optional[TrialReport]) -> TrialReport:
    summary = RunDir(run_dir).read_summary()
    if summary is None or summary.selection is None or not summary.test:
        raise RuntimeError(f"{run_dir} holds no training summary")
    sel, test = summary.selection, summary.test
    final_sel = (
        sel.get("final") if sel.get("final") is not None else (last or {}).get("selection_score", sel.get("best"))
    )
    out = (last or TrialReport(step=0, epoch=0, candidate_score=math.nan, accepted=0, action="none")).copy()
    out["selection_score"] = float(final_sel if final_sel is not None else math.nan)  # METRIC
    out["best_selection_score"] = _score(sel.get("best"))  # a best of 0.0 is a score, not a missing one
    out["test_hard_best"] = float(test["best"]["hard"])
    out["test_soft_best"] = float(test["best"]["soft"])
    out["finished"] = 1
    out["trial"] = key
    out["run_dir"] = str(run_dir)
    return out


class _Parent:
    """The sweep's MLflow parent run, through the same Tracker as a training run (kill-safe store,
    the experiment's kind, a run created once even across kills: its uid is saved first)."""

    def __init__(self, data: PlainConfig, name: str, sdir: Path, existing: Optional[str]):
        from skillopt_ray.runs.tracking import Tracker, default_tracking_uri

        t = data["tracking"]
        self.enabled = bool(t["mlflow"])
        self.uri = t["tracking_uri"] or default_tracking_uri(data["output_dir"])
        self.run_id: Optional[str] = None
        self.tracker = Tracker(
            self.enabled,
            self.uri,
            t["experiment_name"] or data["experiment"],
            Path(data["output_dir"]) / "mlflow-artifacts",
        )
        if not self.enabled:
            return
        self.client = self.tracker.client
        record_path = sdir / "mlflow_parent.json"
        record: MlflowRun = json.loads(record_path.read_text()) if record_path.exists() else {}
        if existing:
            record["run_id"] = existing
        self.run_id = self.tracker.start(
            record, name, {"sweep": name, "sweep.role": "parent"}, lambda rec: atomic_write_json(record_path, rec)
        )
        atomic_write_json(record_path, {**record, "run_id": self.run_id, "tracking_uri": self.uri})
        for note in self.tracker.notes:
            print(f"note: {note}", file=sys.stderr)


def _mark_child(run_dir: Path, status: str, tags: dict[str, str], sweep_uri: str) -> None:
    """Set a trial's own MLflow run to `status` (its driver was ended with the trial) with `tags`.

    Only in the sweep's own store, and only a run whose `run_dir` tag is this trial's folder: the trial folder's
    record is a file anyone could plant: a planted tracking address would otherwise receive the sweep's MLflow
    credentials, and a planted run id would get any run in the user's store marked."""
    info = RunDir(run_dir).read_mlflow_run()
    if not info or not info.get("run_id") or not info.get("tracking_uri"):
        return
    if info["tracking_uri"] != sweep_uri:
        print(
            f"note: {run_dir.name} records another MLflow store than the sweep's; its run is left as it is",
            file=sys.stderr,
        )
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(sweep_uri)
    try:
        run = client.get_run(info["run_id"])
        if not _same_folder(run.data.tags.get("run_dir"), run_dir):
            print(
                f"note: {run_dir.name}: its MLflow record names a run of another folder; that run is left as it is",
                file=sys.stderr,
            )
            return
        if run.info.status == "RUNNING":
            client.set_terminated(info["run_id"], status)
        for k, v in tags.items():
            client.set_tag(info["run_id"], k, v)
    except Exception as e:  # noqa: BLE001 - the record in sweep.json is what counts
        print(f"note: could not mark the MLflow run of {run_dir.name}: {e}", file=sys.stderr)


def _same_folder(tag: Optional[str], run_dir: Path) -> bool:
    """Whether a run's `run_dir` tag (what its driver wrote) names this folder."""
    return bool(tag) and Path(str(tag)).resolve() == run_dir.resolve()


def dry_run(spec: SweepSpec, trials: list[Trial], name: str, sdir: Path, previous: dict[str, TrialRow]) -> int:
    print(f"sweep {name} (dry run: nothing started)")
    print(
        "search space: "
        + "; ".join(
            [f"{k}: {spec.params[k].describe()}" for k in spec.keys]
            + [f"seed: grid {sorted({t.seed for t in trials})}"]
        )
        + (f"; {spec.num_samples} samples" if spec.num_samples > 1 else "")
    )
    if spec.fixed:
        print("fixed: " + ", ".join(f"{k}={v}" for k, v in spec.fixed.items()))
    if spec.scheduler != "none":
        print(f"scheduler: {spec.scheduler} on {METRIC} (max), " + ", ".join(f"{k}={v}" for k, v in spec.asha.items()))
    cols = spec.keys + ["seed", "status", "run directory"]
    rows = [[t.params[k] for k in spec.keys] + [str(t.seed), _status(t, previous), t.run_dir.name] for t in trials]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    counts = {s: sum(1 for r in rows if r[-2] == s) for s in ("new", "unfinished", "finished", "stopped")}
    print(
        f"{len(trials)} trials: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f"; sweep directory {sdir}"
    )
    return EXIT_OK


def _sweep_meta(
    name: str,
    spec: SweepSpec,
    trials: list[Trial],
    overrides: list[str],
    parent: _Parent,
    previous: dict[str, TrialRow],
) -> dict[str, Any]:
    """The sweep's own record (sweep.json): its space, its parent run and each trial's status."""
    return {
        "name": name,
        "presets": spec.presets,
        "keys": spec.keys,
        "space": {k: p.describe() for k, p in spec.params.items()},
        "grid": spec.grid,
        "fixed": spec.fixed,
        "num_samples": spec.num_samples,
        "seeds": sorted({t.seed for t in trials}),
        "scheduler": spec.scheduler,
        "overrides": overrides,
        "parent_run_id": parent.run_id,
        "tracking_uri": parent.uri if parent.enabled else None,
        "trials": [
            {
                "key": t.key,
                "params": t.params,
                "seed": t.seed,
                "run_dir": str(t.run_dir),
                "status": t.status,
                **(
                    {"stopped": previous[str(t.run_dir)].get("stopped")}
                    if t.status == "stopped" and str(t.run_dir) in previous
                    else {}
                ),
            }
            for t in trials
        ],
    }


def _log_sweep_params(parent: _Parent, spec: SweepSpec, trials: list[Trial]) -> None:
    """The search space, seeds and scheduler as the parent run's params (ones it already has are kept)."""
    assert parent.run_id is not None, "an enabled sweep tracker has opened its parent run"
    existing = parent.client.get_run(parent.run_id).data.params
    params = {f"sweep.space.{k}": p.describe() for k, p in spec.params.items()}
    params.update({f"sweep.fixed.{k}": str(v) for k, v in spec.fixed.items()})
    params.update(
        {
            "sweep.seeds": json.dumps(sorted({t.seed for t in trials})),
            "sweep.trials": str(len(trials)),
            "sweep.num_samples": str(spec.num_samples),
            "sweep.scheduler": spec.scheduler,
        }
    )
    for k, v in params.items():
        if k not in existing:
            parent.client.log_param(parent.run_id, k, v)


def _finish_parent(parent: _Parent, report: Any, sdir: Path, trials: list[Trial], failed: list[str]) -> None:
    """Tag the parent run with the best config, log the comparison to it and end it with the sweep's outcome."""
    assert parent.run_id is not None, "an enabled sweep tracker has opened its parent run"
    best = report.best()
    if best is not None:
        parent.client.set_tag(parent.run_id, "best_config", json.dumps(best["params"]))
        parent.client.set_tag(parent.run_id, "best_config_rule", best["rule"])
        parent.client.set_tag(parent.run_id, "best_config_tied", json.dumps(best["tied"]))
        parent.tracker.log_metrics(  # a tie has no winner, so no winner's test score
            {
                k: v
                for k, v in (
                    ("best_mean_selection_score", best["best_selection_score_mean"]),
                    ("best_mean_test_hard", best["test_hard_best_mean"]),
                )
                if not math.isnan(v)
            },
            0,
        )
    for f in sorted((sdir / "comparison").iterdir()):
        parent.client.log_artifact(parent.run_id, str(f), "comparison")
    done = all(t.status in ("finished", "stopped") for t in trials)
    parent.tracker.finish("FAILED" if failed else "FINISHED" if done else "KILLED")


def _sweep_exit(trials: list[Trial], failed: list[str]) -> int:
    """Say what is left to do (stopped, unfinished or failed trials) and return the sweep's exit code."""
    stopped = [t for t in trials if t.status == "stopped"]
    if stopped:
        print(
            f"{len(stopped)} trial(s) stopped early by the scheduler (run directories resumable; "
            "rerun with sweep.resume_stopped=true to finish them)",
            file=sys.stderr,
        )
    unfinished = [t for t in trials if t.status in ("new", "unfinished")]
    if unfinished and not failed:
        print(
            f"sweep stopped with {len(unfinished)} of {len(trials)} trials unfinished; rerun the same command to resume",
            file=sys.stderr,
        )
        return EXIT_STOPPED
    if failed:
        print(
            f"error: {len(failed)} trial(s) failed; rerun the same command to retry them. First: {failed[0]}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return EXIT_OK


def write_skill_diffs(records: list[Any], path: Path) -> Optional[Path]:
    """Every finished trial's best skill diffed against the best skill of the trial with the highest best
    selection score (the first such trial), one section per trial: where the runs' skills went apart."""
    from skillopt_ray.runs.records import RecordError
    from skillopt_ray.runs.report import skill_diff

    recs = [r for r in records if r.run_dir]
    if len(recs) < 2:
        path.unlink(missing_ok=True)
        return None

    def label(r: Any) -> str:
        return " ".join([f"{k}={v}" for k, v in r.params.items()] + [f"seed={r.seed}"])

    ref = max(recs, key=lambda r: r.metrics.get("best_selection_score", -math.inf))
    parts = [
        f"# Best skills of the sweep's runs, each against {label(ref)}",
        f"A is {label(ref)}: the run with the highest best selection score (the first of any tie).",
    ]
    for r in recs:
        if r is ref:
            continue
        try:
            parts.append(f"## {label(r)}\n\n```diff\n{skill_diff(ref.run_dir, r.run_dir)}```")
        except RecordError as e:
            parts.append(f"## {label(r)}\n\n{e}")
    atomic_write_text(path, "\n\n".join(parts) + "\n")  # a rename: never into a planted hard link
    return path


def _short(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _brief(value: Any) -> str:
    """A value for a trial's name: sampled floats to 4 significant digits (the columns show them whole)."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return norm_value(value)


def _TrialTable(keys: list[str], total: int, every_s: float) -> Any:  # noqa: N802 - builds a Tune reporter lazily
    """Tune's progress as one table of our columns: the swept values, the seed, the status and the per-step scores.
    Tune's own reporter adds its staging folder in Ray's temp dir, resource counts and ASHA's rungs on every print."""
    from ray.tune import ProgressReporter

    class Table(ProgressReporter):
        def __init__(self) -> None:
            self._last = -math.inf
            self._shown = ""

        def should_report(self, trials: list, done: bool = False) -> bool:
            return done or time.monotonic() - self._last >= every_s

        def report(self, trials: list, done: bool, *sys_info: Any) -> None:
            self._last = time.monotonic()
            counts: dict[str, int] = {}
            for t in trials:
                counts[t.status] = counts.get(t.status, 0) + 1
            cols = [_short(k) for k in keys] + ["seed", "status"] + list(REPORT_COLUMNS.values())
            rows = []
            for t in trials:
                r = t.last_result or {}
                rows.append(
                    [_brief(t.config.get(k)) for k in keys]
                    + [str(t.config.get("seed")), t.status]
                    + [_cell(r.get(m)) for m in REPORT_COLUMNS]
                )
            widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
            lines = [
                f"Number of trials: {len(trials)}/{total} ("
                + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                + ")",
                "  ".join(c.ljust(w) for c, w in zip(cols, widths)),
                *("  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows),
            ]
            text = "\n".join(lines) + "\n"
            if text != self._shown or done:  # printed when something changed, not every few seconds
                print(text, flush=True)
                self._shown = text

    return Table()


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)
