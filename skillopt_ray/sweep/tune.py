"""The Tune run of a sweep: one trial per planned run (the CLI's own code path in a thread, its steps reported as
they are recorded), the concurrency cap, the shared embedded server, ASHA, and what Tune ended early."""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.cli import UsageError, preflight, run_dir_for, start_ray
from skillopt_ray.compare.records import read_steps, run_finished
from skillopt_ray.config import from_container
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.runs.records import Origin, Outcome
from skillopt_ray.sweep.report import (
    METRIC,
    TrialReport,
    _brief,
    _mark_child,
    _Parent,
    _short,
    _TrialTable,
    final_report,
    step_report,
)
from skillopt_ray.sweep.spec import SweepSpec, search_space
from skillopt_ray.sweep.trials import (
    StoppedBy,
    StopPoint,
    SweepContext,
    Trial,
    TrialPlan,
    TrialRow,
    _override,
    asha_max_t,
    compose_trial,
    max_concurrent_trials,
    prepare,
    shared_embedded_settings,
    signature,
    trial_cpus,
    trial_key,
)


@contextmanager
def _run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Two trials that land on one run directory (equal draws) take turns; the second replays."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    # opened, never truncated or written: a lock file planted as a hard link to a file elsewhere is left as it is
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(run_dir.parent / f".{run_dir.name}.sweep-lock", flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _trainable(config: dict[str, Any], plans: dict[str, TrialPlan], ctx: SweepContext) -> None:
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
    if plan is None:  # not planned (should not happen): compose and check it here the same way
        data, params = compose_trial(ctx["overrides"], ctx["fixed"], config, keys, tuple(ctx["search_dirs"]))
        key = trial_key(params, int(config["seed"]))
        prepared = prepare(data, ctx, params, key, int(config["seed"]))
        plan = TrialPlan(data=prepared, key=key, run_dir=str(run_dir_for(data)))
    run_dir, key = Path(plan["run_dir"]), plan["key"]
    with _run_dir_lock(run_dir):
        reported = 0  # the last step handed to Tune
        last: Optional[TrialReport] = None

        def report_new() -> None:
            nonlocal reported, last
            for h in read_steps(run_dir):
                if h.step > reported:
                    last = step_report(h, key, run_dir)
                    tune.report(last)
                    reported = h.step

        if run_finished(run_dir) or (str(run_dir) in ctx["stopped"] and not ctx["resume_stopped"]):
            report_new()  # replay what the run recorded, so Tune's table and the scheduler see it
            if run_finished(run_dir):
                tune.report(final_report(run_dir, key, last))
            return
        outcome = Outcome()

        def run() -> None:
            try:
                checked = plan.get("checked") or preflight(from_container(plan["data"]))
                outcome.update(execute(checked, run_dir, plan.get("origin")))
            except BaseException as e:  # noqa: BLE001 - handed to the trial thread below
                outcome.update(Outcome(status="error", message=f"{type(e).__name__}: {e}"))

        worker = threading.Thread(target=run, name=f"run {key}", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            report_new()
        report_new()
        if outcome.get("status") != "ok":
            raise RuntimeError(f"training run failed: {outcome.get('message')}")
        tune.report(final_report(run_dir, key, last))


def _allow_trial_workers(spec: SweepSpec, first: PlainConfig) -> None:
    """Keep trials in the driver's working directory and raise the raylet's worker warning to the count expected."""
    os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"
    # A sweep runs more Ray workers than the machine has cores (per trial: Tune's actor, the driver, the gateway,
    # the env actors); the raylet warns each time workers reach 4x its start-up concurrency (the core count).
    # Concurrent trials are capped below, so the expected count is known: let that many start without a warning.
    workers = (spec.max_concurrent or os.cpu_count() or 1) * (int(first["ray"]["env_actors"]) + 3)
    os.environ.setdefault("RAY_worker_maximum_startup_concurrency", str(max(os.cpu_count() or 1, workers // 2)))


def _trial_plans(spec: SweepSpec, trials: list[Trial], overrides: list[str], ctx: SweepContext) -> dict[str, TrialPlan]:
    """Each trial's prepared config, key, run directory and provenance, keyed by its point in the search space."""
    plans: dict[str, TrialPlan] = {}
    for t in trials:
        data = prepare(t.data, ctx, t.params, t.key, t.seed)
        plan = plans[signature({**t.values, "seed": t.seed}, spec.keys)] = TrialPlan(
            data=data,
            key=t.key,
            run_dir=str(t.run_dir),
            # the trial's provenance: the sweep's command line and the overrides that compose this trial
            origin=Origin(
                argv=list(sys.argv),
                overrides=[
                    *overrides,
                    *(_override(k, v) for k, v in spec.fixed.items()),
                    *(_override(k, t.values[k]) for k in spec.keys),
                    f"seed={t.seed}",
                ],
            ),
        )
        if t.checked is not None:  # a trial the sweep will run: checked before Tune started
            plan["checked"] = t.checked.with_data(data)
    return plans


def _record_results(
    results: Any,
    stops: dict[str, StopPoint],
    spec: SweepSpec,
    trials: list[Trial],
    plans: dict[str, TrialPlan],
    previous: dict[str, TrialRow],
    sweep_uri: str,
) -> list[str]:
    """Mark each trial Tune ended early as stopped (by the scheduler) or interrupted. Returns failure lines."""
    by_dir = {str(t.run_dir): t for t in trials}
    failed = []
    for r in results:
        m = r.metrics or {}
        plan = plans.get(signature(r.config, spec.keys))
        trial = by_dir.get(m.get("run_dir", "")) or by_dir.get(plan["run_dir"] if plan else "")
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
            _set_status(previous, t, "unfinished")
        if stop is not None:
            _set_status(
                previous,
                t,
                "stopped",
                StoppedBy(by=spec.scheduler, step=stop.get("step"), selection_score=stop.get("selection_score")),
            )
            t.status = "stopped"
            _mark_child(
                t.run_dir,
                "KILLED",
                {
                    "sweep.status": "stopped",
                    "sweep.stopped_by": spec.scheduler,
                    "sweep.stopped_at_step": str(stop.get("step")),
                },
                sweep_uri,
            )
        else:
            _mark_child(t.run_dir, "KILLED", {"sweep.status": "interrupted"}, sweep_uri)
    return failed


def _set_status(previous: dict[str, TrialRow], t: Trial, status: str, stopped: Optional[StoppedBy] = None) -> None:
    """A trial's row in the sweep's record with its new status (and who stopped it); other keys are kept."""
    row = previous.get(str(t.run_dir))
    new = TrialRow(key=t.key, params=t.params, seed=t.seed, run_dir=str(t.run_dir), status=status)
    if row is not None:
        new = row.copy()
        new["status"] = status
    if stopped is not None:
        new["stopped"] = stopped
    previous[str(t.run_dir)] = new


def _run_tune(
    spec: SweepSpec,
    trials: list[Trial],
    overrides: list[str],
    name: str,
    sdir: Path,
    parent: _Parent,
    previous: dict[str, TrialRow],
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
    ctx = SweepContext(
        name=name,
        keys=spec.keys,
        overrides=overrides,
        fixed=spec.fixed,
        parent_run_id=parent.run_id,
        server_url=server_url,
        stopped=sorted(str(t.run_dir) for t in trials if t.status == "stopped"),
        resume_stopped=spec.resume_stopped,
        search_dirs=list(spec.search_dirs),
    )
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
    return _record_results(results, stops, spec, trials, plans, previous, parent.uri)


def _start_shared_embedded(todo: list[PlainConfig], concurrent: int, sdir: Path) -> Any:
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


def _fit(
    spec: SweepSpec,
    space: dict[str, Any],
    points: list[dict[str, Any]],
    plans: dict[str, TrialPlan],
    ctx: SweepContext,
    first: PlainConfig,
    limit: int,
    sdir: Path,
    trainable: Any = None,
) -> tuple[Any, dict[str, StopPoint]]:
    """Tune over `space`, one trial per point (the planned trials, each a whole config: Tune's public
    `points_to_evaluate`); returns the result grid and {trial id: the result a scheduler stopped it on}."""
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # the classic output, which takes our own progress reporter
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    stops: dict[str, StopPoint] = {}
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


def _asha(spec: SweepSpec, stops: dict[str, StopPoint]) -> Any:
    """ASHA on the per-step selection score (time = training step), remembering whom it stopped."""
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    class RecordingASHA(ASHAScheduler):
        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            action = super().on_trial_result(tune_controller, trial, result)
            if action == TrialScheduler.STOP and not result.get("finished"):
                stops[trial.trial_id] = StopPoint(step=result.get("step"), selection_score=result.get(METRIC))
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
