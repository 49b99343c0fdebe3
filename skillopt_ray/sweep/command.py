"""Sweeps on Ray Tune: the swept config keys are Tune's search space, each trial one full training run
through the same driver code as the CLI, reporting to Tune after every training step.

    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr sweep.seeds=5 [hydra overrides ...]
    python -m skillopt_ray.sweep +experiment=alfworld '+sweep=[lr,gate]' sweep.seeds=3 sweep.max_concurrent=2
    python -m skillopt_ray.sweep +experiment=alfworld '+sweep.params.optimizer.mixed_weight={uniform:[0.1,0.9]}' sweep.num_samples=4
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr sweep.seeds=3 sweep.scheduler=asha
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr sweep.seeds=3 --dry-run   (or sweep.dry_run=true)
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr --cfg job                 (the composed sweep options)

Every `sweep.*` key is a Hydra override checked against a typed schema (skillopt_ray.sweep.spec.SweepOptions);
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

import json
import sys
from pathlib import Path
from typing import Any, Optional

import yaml

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK
from skillopt_ray.base.io import atomic_write_json
from skillopt_ray.cli import UsageError, absolute, check_output_dir, compose, plain, preflight
from skillopt_ray.compare.render import sweep_comparison
from skillopt_ray.config import from_container
from skillopt_ray.runs.tracking import TrackingError
from skillopt_ray.sweep.report import (
    METRIC,
    REPORT_COLUMNS,
    _finish_parent,
    _log_sweep_params,
    _Parent,
    _sweep_exit,
    _sweep_meta,
    dry_run,
    final_report,
    step_report,
    write_skill_diffs,
)
from skillopt_ray.sweep.spec import SweepSpec, expand, option_keys, parse_args, preset_names, search_space, sweep_name
from skillopt_ray.sweep.trials import (
    Trial,
    _status,
    asha_max_t,
    compose_trial,
    max_concurrent_trials,
    plan_trials,
    prepare,
    shared_embedded_settings,
    signature,
    training_steps,
    trial_cpus,
    trial_key,
)
from skillopt_ray.sweep.tune import _run_tune

__all__ = [
    "METRIC",
    "REPORT_COLUMNS",
    "Trial",
    "asha_max_t",
    "compose_trial",
    "dry_run",
    "expand",
    "final_report",
    "main",
    "max_concurrent_trials",
    "parse_args",
    "plan_trials",
    "prepare",
    "preset_names",
    "run_sweep",
    "search_space",
    "shared_embedded_settings",
    "show_config",
    "signature",
    "step_report",
    "trial_cpus",
    "trial_key",
    "training_steps",
    "write_skill_diffs",
]


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
    for t in trials:
        t.status = _status(t, previous)
    runnable = [
        t for t in trials if t.status in ("new", "unfinished") or (t.status == "stopped" and spec.resume_stopped)
    ]
    data_seen: set[str] = set()  # trials reading the same data and splits: read once
    for t in runnable:  # every check of a trial's run, once, before anything of the sweep is made (cli.preflight)
        t.checked = preflight(from_container(t.data), data_seen, t.skills)
    if not any(Path(t.data["output_dir"]) == out for t in runnable):  # else a trial's check made and probed it
        check_output_dir(out)
    sdir.mkdir(parents=True, exist_ok=True)
    parent = _Parent(first, name, sdir, meta.get("parent_run_id"))
    stopped_before = {str(t.run_dir) for t in trials if t.status == "stopped"}
    atomic_write_json(meta_path, _sweep_meta(name, spec, trials, overrides, parent, previous))
    if parent.enabled:
        _log_sweep_params(parent, spec, trials)
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

    base = redact(plain(absolute(compose(overrides, search_dirs=spec.search_dirs, extra_keys=option_keys()))))
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
