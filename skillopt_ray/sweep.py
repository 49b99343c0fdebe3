"""Sweeps on Ray Tune: the swept config keys are Tune's search space, each trial one full training run
through the same driver code as the CLI, reporting to Tune after every training step.

    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr sweep.seeds=5 [hydra overrides ...]
    python -m skillopt_ray.sweep +experiment=alfworld '+sweep=[lr,gate]' sweep.seeds=3 sweep.max_concurrent=2
    python -m skillopt_ray.sweep +experiment=alfworld '+sweep.params.optimizer.mixed_weight={uniform:[0.1,0.9]}' sweep.num_samples=4
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr sweep.seeds=3 sweep.scheduler=asha
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr sweep.seeds=3 --dry-run   (or sweep.dry_run=true)
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr --cfg job                 (the composed sweep options)

Every `sweep.*` key is a Hydra override checked against a typed schema (skillopt_ray.sweep_spec.SweepOptions);
presets are the config group `sweep` in the top-level sweeps/ folder (`--config-dir DIR` adds
DIR/sweep/NAME.yaml). The other overrides compose each trial's run config, as `python -m skillopt_ray` does.

Search space (`sweep.params.<config key>`): a list is a grid (`tune.grid_search`); `{choice: [a, b]}`,
`{uniform: [lo, hi]}`, `{loguniform: [lo, hi]}`, `{randint: [lo, hi]}` (hi excluded, as in Tune) are sampled,
`sweep.num_samples` times over the grid. Seeds are one more grid key. Sampling is seeded from the sweep's name,
so a rerun draws the same values.

Every trial's config is composed and its paths resolved here, before Tune starts (Tune changes
trial working directories). The same command resumes: a trial whose run finished reports its
recorded steps again and ends at once; unfinished ones resume their run directory and its cached
model calls; trials a scheduler stopped stay stopped unless `sweep.resume_stopped=true`.

Options: sweep.seeds=N|[...], sweep.max_concurrent=N, sweep.num_samples=N, sweep.scheduler=none|asha (ASHA on
the per-step selection score, mode max; sweep.asha.grace_period, .reduction_factor, .max_t: default one past
the runs' last training step), sweep.verbose=0..3 (the trial table at 1), sweep.dry_run=true (list the trials
and exit without starting Ray), sweep.resume_stopped=true.
"""

from __future__ import annotations

import copy
import fcntl
import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from skillopt_ray.cli import (
    UsageError,
    check_output_dir,
    compose,
    needs_embedded_server,
    resolve_paths,
    run_dir_for,
    start_ray,
    typed,
)
from skillopt_ray.compare import norm_value, read_steps, run_finished, sweep_comparison
from skillopt_ray.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from skillopt_ray.rundir import RunDir
from skillopt_ray.sweep_spec import (
    SweepSpec,
    expand,
    option_keys,
    parse_args,
    preset_names,
    sample_seed,
    search_space,
    sweep_name,
)
from skillopt_ray.tracking import TrackingError
from skillopt_ray.utils.io import atomic_write_json

METRIC = "selection_score"  # what a scheduler compares: the current skill's selection score after each step
REPORT_COLUMNS = {
    "step": "step",
    "selection_score": "selection",
    "candidate_score": "candidate",
    "best_selection_score": "best selection",
    "test_hard_best": "test hard",
}


@dataclass
class Trial:
    key: str  # e.g. "optimizer.learning_rate=4,seed=42"
    params: dict[str, str]  # swept key -> the run's resolved value, normalised
    seed: int
    data: dict[str, Any]
    run_dir: Path
    values: dict[str, Any] = field(default_factory=dict)  # swept key -> the value Tune hands the trial
    status: str = "new"  # new | finished | stopped | unfinished

    def finished(self) -> bool:
        return run_finished(self.run_dir)


# ---- trials --------------------------------------------------------------------------------------


def _override(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value) if isinstance(value, (list, dict)) else value}"


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def signature(values: dict[str, Any], keys: list[str]) -> str:
    """Which planned trial a Tune config is: its swept values (normalised) and seed."""
    return json.dumps({**{k: norm_value(values[k]) for k in keys}, "seed": int(values["seed"])}, sort_keys=True)


def trial_key(params: dict[str, str], seed: int) -> str:
    return ",".join([f"{k}={v}" for k, v in params.items()] + [f"seed={seed}"])


def compose_trial(
    overrides: list[str],
    fixed: dict[str, Any],
    values: dict[str, Any],
    keys: list[str],
    search_dirs: tuple[str, ...] = (),
) -> tuple[dict[str, Any], dict[str, str]]:
    ovr = (
        overrides
        + [_override(k, v) for k, v in fixed.items()]
        + [_override(k, values[k]) for k in keys]
        + [f"seed={int(values['seed'])}"]
    )
    _obj, data = typed(compose(ovr, search_dirs=search_dirs))
    data = resolve_paths(data)
    return data, {k: norm_value(_get(data, k)) for k in keys}


def plan_trials(spec: SweepSpec, overrides: list[str]) -> list[Trial]:
    """Every trial Tune will run, composed and resolved now (one per run directory)."""
    # the sweep's own keys are known here too, so `seeds=3` is answered with sweep.seeds
    base_data = resolve_paths(typed(compose(overrides, search_dirs=spec.search_dirs, extra_keys=option_keys()))[1])
    base_seed = int(base_data["seed"])
    seeds = [base_seed + s for s in spec.seeds] if spec.seeds_are_offsets else spec.seeds
    keys = spec.keys
    trials: list[Trial] = []
    seen: dict[Path, Trial] = {}
    for values in expand(search_space(spec, seeds), spec.num_samples, sample_seed(spec, overrides)):
        data, params = compose_trial(overrides, spec.fixed, values, keys, spec.search_dirs)
        rd = run_dir_for(data)
        if rd in seen:  # two draws (or spellings) that make the same run: one trial
            continue
        t = Trial(
            trial_key(params, int(values["seed"])), params, int(values["seed"]), data, rd, {k: values[k] for k in keys}
        )
        seen[rd] = t
        trials.append(t)
    return trials


def training_steps(data: dict[str, Any]) -> int:
    """A run's number of training steps (epochs x steps per epoch), from its train split's size: ASHA's max_t."""
    import skillopt_envs

    env = data["env"]
    n = len(skillopt_envs.make(env["name"], env).load_split(env["train_split"]))
    if env.get("limit_train"):
        n = min(n, int(env["limit_train"]))
    return int(data["optimizer"]["epochs"]) * max(1, math.ceil(n / int(data["optimizer"]["batch_size"])))


def asha_max_t(trials: list[dict[str, Any]]) -> int:
    """ASHA's max_t when not given: one past the longest run's last step. ASHA stops a trial whose step reaches
    max_t, and a run at its last step still has its epoch boundary and final tests to do; the rungs are then
    the runs' own steps (not 14 rungs up to 10,000)."""
    return max(training_steps(d) for d in trials) + 1


def trial_cpus(data: dict[str, Any]) -> float:
    """What a trial reserves: a quarter core per env actor (or what the config asks for); its actors then ask 0 CPUs."""
    r = data["ray"]
    return round(max(0.25, r["env_actors"] * max(float(r["actor_num_cpus"]), 0.25)), 2)


def max_concurrent_trials(data: dict[str, Any], total_cpus: float, requested: Optional[int]) -> int:
    """Bounded by CPUs and by the target endpoint's concurrency: each trial keeps env_actors x episodes_per_actor calls in flight."""
    by_cpu = max(1, math.floor(total_cpus / trial_cpus(data)))
    in_flight = data["ray"]["env_actors"] * data["ray"]["episodes_per_actor"]
    target = data["llm"]["target"]
    by_llm = max(1, int(target.get("max_concurrency") or in_flight) // max(1, in_flight))
    rpm = int(target.get("requests_per_minute") or 0)
    if rpm:  # a trial's calls take about a second each: keep the sum of trials under the limit
        by_llm = max(1, min(by_llm, rpm // (60 * max(1, in_flight)) or 1))
    cap = min(by_cpu, by_llm)
    return min(cap, requested) if requested else cap


def shared_embedded_settings(trials: list[dict[str, Any]], concurrent: int) -> Optional[dict[str, Any]]:
    """EmbeddedServer arguments for one server that all these trials can share, or None: no trial
    needs one, one was given (llm.embedded.server_url), or the trials' embedded settings differ.
    Slots and context grow with the number of trials running at once (llama.cpp splits the
    context between its slots)."""
    need = [t for t in trials if needs_embedded_server(t)]
    if not need or any(t["llm"]["embedded"].get("server_url") for t in need):
        return None
    settings = [json.dumps(t["llm"]["embedded"], sort_keys=True) for t in need]
    if len(set(settings)) != 1:
        return None
    e = need[0]["llm"]["embedded"]
    n = max(1, concurrent)
    return {
        "model_path": e["model_path"],
        "ctx_size": e["ctx_size"] * n,
        "threads": e["threads"],
        "parallel": e["parallel"] * n,
        "startup_timeout_s": e["startup_timeout_s"],
    }


def prepare(data: dict[str, Any], ctx: dict[str, Any], params: dict[str, str], key: str, seed: int) -> dict[str, Any]:
    """What the sweep sets in every trial's config: its MLflow parent and tags, no own CPU
    reservation for actors (the trial's covers them), no progress line, the shared server."""
    data = copy.deepcopy(data)
    data["tracking"]["parent_run_id"] = ctx.get("parent_run_id")
    data["tracking"]["tags"] = {
        **(data["tracking"].get("tags") or {}),
        "sweep": ctx["name"],
        "sweep.trial": key,
        "seed": str(seed),
        **{f"sweep.param.{k}": v for k, v in params.items()},
    }
    data["ray"]["actor_num_cpus"] = 0.0
    data["debug"]["progress"] = "off"
    if ctx.get("server_url") and needs_embedded_server(data):
        data["llm"]["embedded"]["server_url"] = ctx["server_url"]
    return data


# ---- the trainable -------------------------------------------------------------------------------


@contextmanager
def _run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Two trials that land on one run directory (equal draws) take turns; the second replays."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f".{run_dir.name}.sweep-lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def step_report(h: dict[str, Any], key: str, run_dir: Path) -> dict[str, Any]:
    """What a trial tells Tune after one training step (the step's record in the run's history)."""
    cand = h.get("candidate_gate_score")
    return {
        "step": int(h["step"]),
        "epoch": int(h.get("epoch") or 0),
        METRIC: float(h["current_score"]),
        "candidate_score": float(cand) if cand is not None else math.nan,
        "best_selection_score": float(h["best_score"]),
        "accepted": 1 if str(h.get("action", "")).startswith(("accept", "force")) else 0,
        "action": str(h.get("action")),
        "finished": 0,
        "trial": key,
        "run_dir": str(run_dir),
    }


def final_report(run_dir: Path, key: str, last: Optional[dict[str, Any]]) -> dict[str, Any]:
    summary = RunDir(run_dir).read_summary()
    if summary is None or summary.selection is None or not summary.test:
        raise RuntimeError(f"{run_dir} holds no training summary")
    sel, test = summary.selection, summary.test
    final_sel = sel.get("final") if sel.get("final") is not None else (last or {}).get(METRIC, sel.get("best"))
    return {
        **(last or {"step": 0, "epoch": 0, "candidate_score": math.nan, "accepted": 0, "action": "none"}),
        METRIC: float(final_sel if final_sel is not None else math.nan),
        "best_selection_score": float(sel["best"] or math.nan),
        "test_hard_best": float(test["best"]["hard"]),
        "test_soft_best": float(test["best"]["soft"]),
        "finished": 1,
        "trial": key,
        "run_dir": str(run_dir),
    }


def _trainable(config: dict[str, Any], plans: dict[str, dict[str, Any]], ctx: dict[str, Any]) -> None:
    """One Tune trial = one training run (cli.execute, the CLI's own code path), reporting each step.

    The run goes on in a thread; this one reads the run's step records (history.jsonl, appended after
    every step; history.json from older runs) and hands each new one to Tune, so a scheduler can stop
    the trial between steps.
    A stopped trial's process ends; the run's actors follow it within a second and the run directory
    resumes like any interrupted run."""
    from ray import tune

    from skillopt_ray.cli import execute

    keys = ctx["keys"]
    plan = plans.get(signature(config, keys))
    if plan is None:  # not planned (should not happen): compose it here the same way
        data, params = compose_trial(ctx["overrides"], ctx["fixed"], config, keys, tuple(ctx["search_dirs"]))
        key = trial_key(params, int(config["seed"]))
        plan = {
            "data": prepare(data, ctx, params, key, int(config["seed"])),
            "key": key,
            "run_dir": str(run_dir_for(data)),
        }
    run_dir, key = Path(plan["run_dir"]), plan["key"]
    with _run_dir_lock(run_dir):
        reported = 0  # the last step handed to Tune
        last: Optional[dict[str, Any]] = None

        def report_new() -> None:
            nonlocal reported, last
            for h in read_steps(run_dir):
                if int(h["step"]) > reported:
                    last = step_report(h, key, run_dir)
                    tune.report(last)
                    reported = int(h["step"])

        if run_finished(run_dir) or (str(run_dir) in ctx["stopped"] and not ctx["resume_stopped"]):
            report_new()  # replay what the run recorded, so Tune's table and the scheduler see it
            if run_finished(run_dir):
                tune.report(final_report(run_dir, key, last))
            return
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome.update(execute(copy.deepcopy(plan["data"]), run_dir, plan.get("origin")))
            except BaseException as e:  # noqa: BLE001 - handed to the trial thread below
                outcome.update(status="error", message=f"{type(e).__name__}: {e}")

        worker = threading.Thread(target=run, name=f"run {key}", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            report_new()
        report_new()
        if outcome.get("status") != "ok":
            raise RuntimeError(f"training run failed: {outcome.get('message')}")
        tune.report(final_report(run_dir, key, last))


# ---- MLflow parent -------------------------------------------------------------------------------


class _Parent:
    """The sweep's MLflow parent run, through the same Tracker as a training run (kill-safe store,
    the experiment's kind, a run created once even across kills: its uid is saved first)."""

    def __init__(self, data: dict[str, Any], name: str, sdir: Path, existing: Optional[str]):
        from skillopt_ray.tracking import Tracker, default_tracking_uri

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
        record = json.loads(record_path.read_text()) if record_path.exists() else {}
        if existing:
            record["run_id"] = existing
        self.run_id = self.tracker.start(
            record, name, {"sweep": name, "sweep.role": "parent"}, lambda rec: atomic_write_json(record_path, rec)
        )
        atomic_write_json(record_path, {**record, "run_id": self.run_id, "tracking_uri": self.uri})
        for note in self.tracker.notes:
            print(f"note: {note}", file=sys.stderr)


def _mark_child(run_dir: Path, status: str, tags: dict[str, str]) -> None:
    """Set a trial's own MLflow run to `status` (its driver was ended with the trial) with `tags`."""
    info = RunDir(run_dir).read_mlflow_run()
    if not info or not info.get("run_id") or not info.get("tracking_uri"):
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(info["tracking_uri"])
    try:
        if client.get_run(info["run_id"]).info.status == "RUNNING":
            client.set_terminated(info["run_id"], status)
        for k, v in tags.items():
            client.set_tag(info["run_id"], k, v)
    except Exception as e:  # noqa: BLE001 - the record in sweep.json is what counts
        print(f"note: could not mark the MLflow run of {run_dir.name}: {e}", file=sys.stderr)


# ---- the sweep -----------------------------------------------------------------------------------


def _status(t: Trial, previous: dict[str, dict[str, Any]]) -> str:
    if t.finished():
        return "finished"
    prev = previous.get(str(t.run_dir), {})
    if prev.get("status") == "stopped":
        return "stopped"
    return "unfinished" if RunDir(t.run_dir).state_path.exists() else "new"


def dry_run(spec: SweepSpec, trials: list[Trial], name: str, sdir: Path, previous: dict[str, dict[str, Any]]) -> int:
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
    previous: dict[str, dict[str, Any]],
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


def run_sweep(spec: SweepSpec, overrides: list[str]) -> int:
    trials = plan_trials(spec, overrides)
    first = trials[0].data
    name = sweep_name(spec, overrides, first["experiment"])
    out = Path(first["output_dir"])
    sdir = out / "sweeps" / name
    meta_path = sdir / "sweep.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    previous = {t["run_dir"]: t for t in meta.get("trials", [])}
    if spec.dry_run:
        return dry_run(spec, trials, name, sdir, previous)
    check_output_dir(out)
    sdir.mkdir(parents=True, exist_ok=True)
    parent = _Parent(first, name, sdir, meta.get("parent_run_id"))
    for t in trials:
        t.status = _status(t, previous)
    stopped_before = {str(t.run_dir) for t in trials if t.status == "stopped"}
    atomic_write_json(meta_path, _sweep_meta(name, spec, trials, overrides, parent, previous))
    if parent.enabled:
        _log_sweep_params(parent, spec, trials)
    runnable = [
        t for t in trials if t.status in ("new", "unfinished") or (t.status == "stopped" and spec.resume_stopped)
    ]
    print(
        f"sweep {name}: {len(trials)} trials ({sum(t.status == 'finished' for t in trials)} finished, "
        f"{len(stopped_before)} stopped by a scheduler{' - resuming them' if spec.resume_stopped and stopped_before else ''}), "
        f"directory {sdir}",
        file=sys.stderr,
    )
    failed: list[str] = []
    if runnable:
        failed = _run_tune(spec, trials, overrides, name, sdir, parent, previous)
    for t in trials:
        t.status = _status(t, previous)
    atomic_write_json(meta_path, _sweep_meta(name, spec, trials, overrides, parent, previous))
    report = sweep_comparison(sdir)
    report.write(sdir / "comparison", force=True)  # the sweep's own folder, rewritten on every rerun
    write_skill_diffs(report.records, sdir / "comparison" / "skill_diffs.md")  # logged with the comparison
    if parent.enabled:
        _finish_parent(parent, report, sdir, trials, failed)
    print(report.markdown())
    print(f"sweep directory: {sdir}")
    if parent.enabled:
        print(f"mlflow parent run: {parent.run_id} (tracking uri {parent.uri})")
    return _sweep_exit(trials, failed)


def write_skill_diffs(records: list[Any], path: Path) -> Optional[Path]:
    """Every finished trial's best skill diffed against the best skill of the trial with the highest best
    selection score (the first such trial), one section per trial: where the runs' skills went apart."""
    from skillopt_ray.records import RecordError
    from skillopt_ray.report import skill_diff

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
    path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return path


def _allow_trial_workers(spec: SweepSpec, first: dict[str, Any]) -> None:
    """Keep trials in the driver's working directory and raise the raylet's worker warning to the count expected."""
    os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"
    # A sweep runs more Ray workers than the machine has cores (per trial: Tune's actor, the driver, the gateway,
    # the env actors); the raylet warns each time workers reach 4x its start-up concurrency (the core count).
    # Concurrent trials are capped below, so the expected count is known: let that many start without a warning.
    workers = (spec.max_concurrent or os.cpu_count() or 1) * (int(first["ray"]["env_actors"]) + 3)
    os.environ.setdefault("RAY_worker_maximum_startup_concurrency", str(max(os.cpu_count() or 1, workers // 2)))


def _trial_plans(
    spec: SweepSpec, trials: list[Trial], overrides: list[str], ctx: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each trial's prepared config, key, run directory and provenance, keyed by its point in the search space."""
    plans: dict[str, dict[str, Any]] = {}
    for t in trials:
        plans[signature({**t.values, "seed": t.seed}, spec.keys)] = {
            "data": prepare(t.data, ctx, t.params, t.key, t.seed),
            "key": t.key,
            "run_dir": str(t.run_dir),
            # the trial's provenance: the sweep's command line and the overrides that compose this trial
            "origin": {
                "argv": list(sys.argv),
                "overrides": [
                    *overrides,
                    *(_override(k, v) for k, v in spec.fixed.items()),
                    *(_override(k, t.values[k]) for k in spec.keys),
                    f"seed={t.seed}",
                ],
            },
        }
    return plans


def _record_results(
    results: Any,
    stops: dict[str, dict[str, Any]],
    spec: SweepSpec,
    trials: list[Trial],
    plans: dict[str, dict[str, Any]],
    previous: dict[str, dict[str, Any]],
) -> list[str]:
    """Mark each trial Tune ended early as stopped (by the scheduler) or interrupted. Returns failure lines."""
    by_dir = {str(t.run_dir): t for t in trials}
    failed = []
    for r in results:
        m = r.metrics or {}
        trial = by_dir.get(m.get("run_dir", "")) or by_dir.get(
            plans.get(signature(r.config, spec.keys), {}).get("run_dir", "")
        )
        if r.error is not None:
            failed.append(f"{trial.key if trial else '?'}: {str(r.error).strip().splitlines()[-1][:300]}")
            continue
        stop = stops.get(m.get("trial_id", ""))
        if trial is None or trial.finished():
            continue
        t = trial
        if t.status == "stopped" and not spec.resume_stopped:  # replayed only
            continue
        if stop is None and t.status == "stopped":  # resumed and not stopped again
            previous[str(t.run_dir)] = {**previous.get(str(t.run_dir), {}), "status": "unfinished"}
        if stop is not None:
            record = {"by": spec.scheduler, "step": stop.get("step"), METRIC: stop.get(METRIC)}
            previous[str(t.run_dir)] = {**previous.get(str(t.run_dir), {}), "status": "stopped", "stopped": record}
            t.status = "stopped"
            _mark_child(
                t.run_dir,
                "KILLED",
                {
                    "sweep.status": "stopped",
                    "sweep.stopped_by": spec.scheduler,
                    "sweep.stopped_at_step": str(stop.get("step")),
                },
            )
        else:
            _mark_child(t.run_dir, "KILLED", {"sweep.status": "interrupted"})
    return failed


def _run_tune(
    spec: SweepSpec,
    trials: list[Trial],
    overrides: list[str],
    name: str,
    sdir: Path,
    parent: _Parent,
    previous: dict[str, dict[str, Any]],
) -> list[str]:
    """Run the search space on Tune; mark the trials a scheduler stopped. Returns failure lines."""
    import ray

    first = trials[0].data
    _allow_trial_workers(spec, first)
    start_ray(first)
    total = float(ray.cluster_resources().get("CPU", 1))
    limit = max_concurrent_trials(first, total, spec.max_concurrent)
    todo = [t for t in trials if t.status != "finished"]
    print(
        f"sweep {name}: {len(todo)} trials to run, at most {limit} at a time, {trial_cpus(first)} CPU each",
        file=sys.stderr,
    )
    embedded, server_url = _start_shared_embedded([t.data for t in todo], limit, sdir)
    ctx = {
        "name": name,
        "keys": spec.keys,
        "overrides": overrides,
        "fixed": spec.fixed,
        "parent_run_id": parent.run_id,
        "server_url": server_url,
        "stopped": sorted(str(t.run_dir) for t in trials if t.status == "stopped"),
        "resume_stopped": spec.resume_stopped,
        "search_dirs": list(spec.search_dirs),
    }
    plans = _trial_plans(spec, trials, overrides, ctx)
    seeds = sorted({t.seed for t in trials}, key=[t.seed for t in trials].index)
    points = [{**t.values, "seed": t.seed} for t in trials]  # one per run directory, finished ones replay
    if spec.scheduler == "asha" and spec.asha.get("max_t") is None:
        spec.asha["max_t"] = asha_max_t([t.data for t in trials])
    try:
        results, stops = _fit(spec, search_space(spec, seeds), points, plans, ctx, first, limit, sdir)
    finally:
        if embedded is not None:
            embedded.stop()
    return _record_results(results, stops, spec, trials, plans, previous)


def _start_shared_embedded(todo: list[dict[str, Any]], concurrent: int, sdir: Path) -> Any:
    """One embedded server for all trials (instead of one llama.cpp process per trial); its URL goes
    into each trial's llm.embedded.server_url, which is not part of a run's identity."""
    settings = shared_embedded_settings(todo, concurrent)
    if settings is None:
        return None, None
    from skillopt_ray.llm.embedded import EmbeddedServer, EmbeddedUnavailable

    server = EmbeddedServer(**settings, log_path=sdir / "embedded_server.log")
    try:
        url = server.start()
    except EmbeddedUnavailable as err:
        raise UsageError(str(err)) from None
    print(f"sweep: one embedded server for all trials at {url} ({settings['parallel']} slots)", file=sys.stderr)
    return server, url


def _short(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _brief(value: Any) -> str:
    """A value for a trial's name: sampled floats to 4 significant digits (the columns show them whole)."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return norm_value(value)


def _fit(
    spec: SweepSpec,
    space: dict[str, Any],
    points: list[dict[str, Any]],
    plans: dict[str, Any],
    ctx: dict[str, Any],
    first: dict[str, Any],
    limit: int,
    sdir: Path,
    trainable: Any = None,
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """Tune over `space`, one trial per point (the planned trials, each a whole config: Tune's public
    `points_to_evaluate`); returns the result grid and {trial id: the result a scheduler stopped it on}."""
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # the classic output, which takes our own progress reporter
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    stops: dict[str, dict[str, Any]] = {}
    scheduler = _asha(spec, stops) if spec.scheduler == "asha" else None
    keys = spec.keys
    reporter = _TrialTable(keys, len(points), spec.report_every_s)
    stopper = _StopAfter(spec.interrupt_after) if spec.interrupt_after else None
    fn = trainable or tune.with_parameters(_trainable, plans=plans, ctx=ctx)
    tuner = tune.Tuner(
        tune.with_resources(fn, {"cpu": trial_cpus(first)}),
        param_space=space,
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode="max",
            num_samples=len(points),
            scheduler=scheduler,
            reuse_actors=False,
            # each planned trial is one point (a whole config replaces one sample); the generator carries the
            # concurrency cap (Tune ignores max_concurrent_trials beside it)
            search_alg=BasicVariantGenerator(points_to_evaluate=[dict(p) for p in points], max_concurrent=limit),
            trial_name_creator=lambda tr: (
                ",".join(f"{_short(k)}={_brief(tr.config.get(k))}" for k in keys) + f",seed={tr.config.get('seed')}"
            ),
            trial_dirname_creator=lambda tr: f"trial_{tr.trial_id}",
        ),
        run_config=tune.RunConfig(
            name=f"tune-{int(time.time())}",
            storage_path=str((sdir / "tune").resolve()),
            verbose=spec.verbose,
            progress_reporter=reporter if spec.verbose else None,
            stop=stopper,  # type: ignore[arg-type]  # _StopAfter builds a tune.Stopper
        ),
    )
    return tuner.fit(), stops


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


def _asha(spec: SweepSpec, stops: dict[str, dict[str, Any]]) -> Any:
    """ASHA on the per-step selection score (time = training step), remembering whom it stopped."""
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    class RecordingASHA(ASHAScheduler):
        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            action = super().on_trial_result(tune_controller, trial, result)
            if action == TrialScheduler.STOP and not result.get("finished"):
                stops[trial.trial_id] = {"step": result.get("step"), METRIC: result.get(METRIC)}
            return action

    max_t, grace, factor = spec.asha["max_t"], spec.asha["grace_period"], spec.asha["reduction_factor"]
    assert max_t is not None and grace is not None and factor is not None, "ASHA's options are resolved before Tune"
    return RecordingASHA(
        time_attr="step",
        max_t=max_t,
        grace_period=grace,
        reduction_factor=factor,
    )


class _StopAfter:
    """Tune stopper for tests: once N trials have finished their runs, stop the sweep as an interruption would.
    Resume does not depend on Tune's view of stopped trials: unfinished run directories are rerun."""

    def __new__(cls, n: int):  # built lazily so importing this module does not import Tune
        from ray.tune import Stopper

        class Impl(Stopper):
            def __init__(self) -> None:
                self.reported: set[str] = set()

            def __call__(self, trial_id: str, result: dict) -> bool:
                if result.get("finished"):  # a trial counts once its run has finished
                    self.reported.add(trial_id)
                return False

            def stop_all(self) -> bool:
                return len(self.reported) >= n

        return Impl()


FLAGS = "--help, --dry-run, --cfg job, --config-dir DIR, --debug (everything else is a Hydra override)"


def _flags(argv: list[str]) -> tuple[Any, list[str]]:
    """The command's flags (anywhere on the line, as users write them); everything else is a Hydra override."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m skillopt_ray.sweep", add_help=False, exit_on_error=False)
    ap.add_argument("-h", "--help", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--cfg")
    ap.add_argument("--config-dir", "-cd")
    ap.add_argument("--debug", action="store_true")
    try:
        args, rest = ap.parse_known_args(argv)
    except argparse.ArgumentError as e:
        raise UsageError(f"{e}; the sweep command's flags: {FLAGS}") from None
    if args.cfg not in (None, "job"):
        raise UsageError(f"--cfg {args.cfg}: the sweep command prints its composed config with --cfg job")
    unknown = [a for a in rest if a.startswith("-")]
    if unknown:
        raise UsageError(f"unknown flag {unknown[0]}; the sweep command's flags: {FLAGS}")
    if args.config_dir and not Path(args.config_dir).is_dir():
        raise UsageError(f"--config-dir {args.config_dir}: no such directory")
    return args, rest


def show_config(spec: SweepSpec, overrides: list[str]) -> None:
    """--cfg job: the sweep's options as composed, and the trials' shared run config (secrets masked)."""
    from skillopt_ray.config import redact

    base = redact(resolve_paths(typed(compose(overrides, search_dirs=spec.search_dirs, extra_keys=option_keys()))[1]))
    sweep = {
        "presets": spec.presets,
        "params": {k: p.describe() for k, p in spec.params.items()},
        "fixed": spec.fixed,
        "seeds": spec.seeds if not spec.seeds_are_offsets else f"{len(spec.seeds)} (the config's seed, +1, ...)",
        "num_samples": spec.num_samples,
        "max_concurrent": spec.max_concurrent,
        "scheduler": spec.scheduler,
        "asha": spec.asha,
    }
    print(yaml.safe_dump({"sweep": sweep, **base}, sort_keys=False), end="")


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args, rest = _flags(argv)
        if args.help:
            print(__doc__)
            print("presets: " + ", ".join(preset_names((args.config_dir,) if args.config_dir else ())))
            return EXIT_OK
        spec, overrides = parse_args(rest, (args.config_dir,) if args.config_dir else ())
        spec.dry_run = spec.dry_run or args.dry_run
        if args.cfg == "job":
            show_config(spec, overrides)
            return EXIT_OK
        return run_sweep(spec, overrides)
    except UsageError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except TrackingError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
