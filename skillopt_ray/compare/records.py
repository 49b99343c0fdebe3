"""Where a comparison's records come from: a run directory (the source of truth), a sweep's sweep.json (the one
place that decides which runs a sweep counts) or MLflow runs."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Optional, cast
from urllib.parse import urlsplit

from skillopt_ray.base import untrusted
from skillopt_ray.compare.groups import Point, Record
from skillopt_ray.runs.records import RecordError, StepRecord
from skillopt_ray.runs.rundir import RunDir  # noqa: E402


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def run_finished(run_dir: Path) -> bool:
    return RunDir(run_dir).finished()


def read_steps(run_dir: Path) -> list[StepRecord]:
    """A run's step records so far, one per step in step order (RunDir's one history reader)."""
    return RunDir(run_dir).history()


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
        "best_selection_score": cast(float, s.selection["best"]),  # a finished run's best is a number
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
    from skillopt_ray.runs.tracking import metric_key

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


def read_sweep_meta(sweep_dir: Path) -> dict[str, Any]:
    """A sweep folder's sweep.json, read as a planted file (no symlink, size-capped, JSON object), its tracking URI
    kept only when it is a local store or the server this environment's MLFLOW_TRACKING_URI names: the MLflow token
    goes nowhere a copied sweep folder says."""
    try:
        meta = untrusted.read_json(Path(sweep_dir), "sweep.json", 64 << 20)
    except untrusted.Untrusted as e:
        raise ValueError(f"{e}; --sweep-dir must be a folder made by python -m skillopt_ray.sweep") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("trials"), list):
        raise ValueError(f"{Path(sweep_dir) / 'sweep.json'} is not a sweep's record (no trials list)")
    uri = str(meta.get("tracking_uri") or "")
    if _server(uri) and _server(uri) != _server(os.environ.get("MLFLOW_TRACKING_URI") or ""):
        meta["tracking_uri"] = None  # its runs are read from their folders; nothing is sent to that server
    return meta


def _server(uri: str) -> str:
    """`scheme://host:port` of an http(s) URI (lower case, default port written out), "" for anything else."""
    try:
        parts = urlsplit(uri.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower(), 0)
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https"):
        return ""
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port}"


def sweep_records(sweep_dir: Path) -> tuple[list[Record], list[str], dict[str, int]]:
    """The finished runs of a sweep, one per run directory, from the trials in its sweep.json.

    This is the one place that decides which runs a sweep's comparison counts; the sweep and
    `compare --sweep-dir` both call it. A run directory missing here (the sweep ran elsewhere) is
    read from the sweep's MLflow child run of that directory."""
    meta = read_sweep_meta(sweep_dir)
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
