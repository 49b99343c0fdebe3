"""Sweeps: a grid of presets x seeds, each trial one full training run through the same driver code, on Ray Tune.

    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr seeds=5 [hydra overrides ...]
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=[lr,gate] seeds=3 sweep.max_concurrent=2

Presets live in `sweeps/*.yaml` (see sweeps/README.md). Every trial's config is composed and its
paths resolved here, before Tune starts (Tune changes trial working directories). The same
command resumes: trials whose run finished are not rerun; unfinished ones resume their run
directory and its cached model calls. MLflow gets one parent run per sweep and a child run per
trial tagged with its swept values and seed; the parent records the best configuration and the
comparison table and plots.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from skillopt_ray.cli import UsageError, check_output_dir, compose, needs_embedded_server, resolve_paths, run_dir_for, start_ray, typed
from skillopt_ray.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from skillopt_ray.utils.io import atomic_write_json

PRESETS_DIR = Path(__file__).resolve().parent.parent / "sweeps"


@dataclass
class SweepSpec:
    presets: list[str]
    grid: dict[str, list[Any]]
    fixed: dict[str, Any]
    seeds: list[int]
    max_concurrent: Optional[int] = None
    interrupt_after: Optional[int] = None
    seeds_are_offsets: bool = False  # seeds=N means the config's seed, +1, ... +N-1


@dataclass
class Trial:
    key: str  # e.g. "optimizer.learning_rate=4,seed=1"
    params: dict[str, Any]
    seed: int
    data: dict[str, Any]
    run_dir: Path
    tags: dict[str, str] = field(default_factory=dict)

    def finished(self) -> bool:
        state = self.run_dir / "state.json"
        return (self.run_dir / "summary.json").is_file() and state.is_file() and json.loads(state.read_text()).get("phase") == "done"


def load_preset(name: str) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    path = Path(name) if name.endswith((".yaml", ".yml")) else PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PRESETS_DIR.glob("*.yaml")))
        raise UsageError(f"unknown sweep preset {name!r}; available: {known} (or a path to a YAML file)")
    doc = yaml.safe_load(path.read_text()) or {}
    params = doc.get("params") or {}
    if not isinstance(params, dict) or not all(isinstance(v, list) and v for v in params.values()):
        raise UsageError(f"sweep preset {path}: 'params' must map config keys to non-empty lists of values")
    return params, dict(doc.get("fixed") or {})


def _value(text: str) -> Any:
    return yaml.safe_load(text)


def parse_args(argv: list[str]) -> tuple[SweepSpec, list[str]]:
    """Split sweep arguments from the Hydra overrides that every trial shares."""
    presets: list[str] = []
    extra: dict[str, list[Any]] = {}
    seeds: Any = 1
    max_concurrent = interrupt_after = None
    overrides = []
    for arg in argv:
        key, eq, val = arg.partition("=")
        bare = key.lstrip("+")
        if bare == "sweep" and eq:
            v = _value(val)
            presets += [str(x) for x in (v if isinstance(v, list) else str(v).split(","))]
        elif bare == "seeds" and eq:
            seeds = _value(val)
        elif bare.startswith("sweep.params.") and eq:
            v = _value(val)
            extra[bare[len("sweep.params."):]] = v if isinstance(v, list) else [v]
        elif bare == "sweep.max_concurrent" and eq:
            max_concurrent = int(val)
        elif bare == "sweep.interrupt_after" and eq:  # test hook: stop once N trials have reported
            interrupt_after = int(val)
        else:
            overrides.append(arg)
    grid: dict[str, list[Any]] = {}
    fixed: dict[str, Any] = {}
    for p in presets:
        g, f = load_preset(p)
        grid.update(g)
        fixed.update(f)
    grid.update(extra)
    if not grid and seeds == 1:
        raise UsageError("nothing to sweep: give +sweep=<preset> (see sweeps/), sweep.params.<key>=[...] or seeds=N")
    if isinstance(seeds, int):
        if seeds < 1:
            raise UsageError(f"seeds must be >= 1, got {seeds}")
        seed_list: Optional[list[int]] = None
        count = seeds
    elif isinstance(seeds, list) and all(isinstance(s, int) for s in seeds):
        seed_list, count = list(seeds), len(seeds)
    else:
        raise UsageError(f"seeds must be a count (seeds=5) or a list (seeds=[1,2,3]), got {seeds!r}")
    spec = SweepSpec(presets, grid, fixed, seed_list or list(range(count)), max_concurrent, interrupt_after, seed_list is None)
    return spec, overrides


def _override(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value) if isinstance(value, (list, dict)) else value}"


def build_trials(spec: SweepSpec, overrides: list[str]) -> list[Trial]:
    """Compose and resolve every trial's config now, before Tune moves working directories."""
    base_data = resolve_paths(typed(compose(overrides))[1])
    base_seed = int(base_data["seed"])
    seeds = [base_seed + s for s in spec.seeds] if spec.seeds_are_offsets else spec.seeds
    keys = sorted(spec.grid)
    trials = []
    for combo in itertools.product(*(spec.grid[k] for k in keys)):
        params = dict(zip(keys, combo))
        for seed in seeds:
            ovr = overrides + [_override(k, v) for k, v in spec.fixed.items()] + [_override(k, v) for k, v in params.items()] + [f"seed={seed}"]
            _obj, data = typed(compose(ovr))
            data = resolve_paths(data)
            key = ",".join([f"{k}={v}" for k, v in params.items()] + [f"seed={seed}"])
            trials.append(Trial(key, params, seed, data, run_dir_for(data)))
    return trials


def sweep_name(spec: SweepSpec, overrides: list[str], experiment: str) -> str:
    blob = json.dumps({"grid": spec.grid, "fixed": spec.fixed, "seeds": spec.seeds, "overrides": sorted(overrides)}, sort_keys=True, default=str)
    label = "+".join(Path(p).stem for p in spec.presets) or "custom"
    return f"{experiment}-{label}-{hashlib.sha256(blob.encode()).hexdigest()[:8]}"


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
    return {"model_path": e["model_path"], "ctx_size": e["ctx_size"] * n, "threads": e["threads"], "parallel": e["parallel"] * n,
            "startup_timeout_s": e["startup_timeout_s"]}


def _trial_fn(config: dict[str, Any]) -> dict[str, Any]:
    """One Tune trial = one training run (cli.execute, the CLI's own code path)."""
    from skillopt_ray.cli import execute

    outcome = execute(config["trial"])
    if outcome["status"] != "ok":
        raise RuntimeError(f"training run failed: {outcome['message']}")
    s = outcome["summary"]
    return {"best_selection_score": s["selection"]["best"], "test_hard_best": s["test"]["best"]["hard"], "run_dir": outcome["run_dir"]}


class _Parent:
    """The sweep's MLflow parent run (MlflowClient with an explicit run id)."""

    def __init__(self, data: dict[str, Any], name: str, existing: Optional[str]):
        from mlflow.tracking import MlflowClient

        from skillopt_ray.tracking import default_tracking_uri

        t = data["tracking"]
        self.enabled = bool(t["mlflow"])
        self.uri = t["tracking_uri"] or default_tracking_uri(data["output_dir"])
        self.run_id: Optional[str] = None
        if not self.enabled:
            return
        self.client = MlflowClient(self.uri)
        exp_name = t["experiment_name"] or data["experiment"]
        exp = self.client.get_experiment_by_name(exp_name)
        if exp is None:
            root = Path(data["output_dir"]) / "mlflow-artifacts"
            root.mkdir(parents=True, exist_ok=True)
            self.experiment_id = self.client.create_experiment(exp_name, artifact_location=root.resolve().as_uri())
        else:
            self.experiment_id = exp.experiment_id
        if existing:
            try:
                self.run_id = self.client.get_run(existing).info.run_id
                self.client.update_run(self.run_id, status="RUNNING")
                return
            except Exception:  # noqa: BLE001 - the store was wiped: start a new parent
                pass
        self.run_id = self.client.create_run(self.experiment_id, run_name=name, tags={"sweep": name, "sweep.role": "parent"}).info.run_id


def run_sweep(spec: SweepSpec, overrides: list[str]) -> int:
    import ray

    trials = build_trials(spec, overrides)
    first = trials[0].data
    name = sweep_name(spec, overrides, first["experiment"])
    out = Path(first["output_dir"])
    check_output_dir(out)
    sdir = out / "sweeps" / name
    sdir.mkdir(parents=True, exist_ok=True)
    meta_path = sdir / "sweep.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    parent = _Parent(first, name, meta.get("parent_run_id"))
    meta = {"name": name, "presets": spec.presets, "grid": spec.grid, "fixed": spec.fixed, "seeds": sorted({t.seed for t in trials}),
            "overrides": overrides, "parent_run_id": parent.run_id, "tracking_uri": parent.uri if parent.enabled else None,
            "trials": [{"key": t.key, "params": t.params, "seed": t.seed, "run_dir": str(t.run_dir)} for t in trials]}
    atomic_write_json(meta_path, meta)
    if parent.enabled:
        existing = parent.client.get_run(parent.run_id).data.params
        params = {f"sweep.grid.{k}": json.dumps(v) for k, v in spec.grid.items()}
        params.update({f"sweep.fixed.{k}": str(v) for k, v in spec.fixed.items()})
        params["sweep.seeds"] = json.dumps(meta["seeds"])
        params["sweep.trials"] = str(len(trials))
        for k, v in params.items():
            if k not in existing:
                parent.client.log_param(parent.run_id, k, v)
    for t in trials:
        t.data["tracking"]["parent_run_id"] = parent.run_id
        t.data["tracking"]["tags"] = {"sweep": name, "sweep.trial": t.key, "seed": str(t.seed),
                                      **{f"sweep.param.{k}": str(v) for k, v in t.params.items()}}
        t.data["ray"]["actor_num_cpus"] = 0.0  # the trial's CPU reservation covers its env actors
        t.data["debug"]["progress"] = "off"
    todo = [t for t in trials if not t.finished()]
    print(f"sweep {name}: {len(trials)} trials ({len(trials) - len(todo)} already finished), directory {sdir}", file=sys.stderr)
    failed: list[str] = []
    if todo:
        os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"
        start_ray(first)
        total = float(ray.cluster_resources().get("CPU", 1))
        limit = max_concurrent_trials(first, total, spec.max_concurrent)
        print(f"sweep {name}: running {len(todo)} trials, at most {limit} at a time, {trial_cpus(first)} CPU each", file=sys.stderr)
        embedded = _start_shared_embedded([t.data for t in todo], limit, sdir)
        try:
            results = _fit(spec, todo, first, limit, sdir)
        finally:
            if embedded is not None:
                embedded.stop()
        for r in results:
            if r.error is not None:
                failed.append(f"{_key_of(r.config, todo)}: {str(r.error).strip().splitlines()[-1][:300]}")
    finished = [t for t in trials if t.finished()]
    from skillopt_ray.compare import Comparison

    report = Comparison.from_run_dirs([(t.params, t.seed, t.run_dir) for t in finished], sorted(spec.grid))
    report.write(sdir / "comparison")
    if parent.enabled:
        best = report.best_group()
        if best is not None:
            parent.client.set_tag(parent.run_id, "best_config", json.dumps(best["params"]))
            parent.client.log_metric(parent.run_id, "best_mean_selection_score", best["best_selection_score_mean"])
            parent.client.log_metric(parent.run_id, "best_mean_test_hard", best["test_hard_best_mean"])
        for f in sorted((sdir / "comparison").iterdir()):
            parent.client.log_artifact(parent.run_id, str(f), "comparison")
        status = "FAILED" if failed else "FINISHED" if len(finished) == len(trials) else "KILLED"
        parent.client.set_terminated(parent.run_id, status)
    print(report.markdown())
    print(f"sweep directory: {sdir}")
    if parent.enabled:
        print(f"mlflow parent run: {parent.run_id} (tracking uri {parent.uri})")
    if len(finished) < len(trials) and not failed:
        print(f"sweep stopped with {len(trials) - len(finished)} of {len(trials)} trials unfinished; rerun the same command to resume",
              file=sys.stderr)
        return EXIT_STOPPED
    if failed:
        print(f"error: {len(failed)} trial(s) failed; rerun the same command to retry them. First: {failed[0]}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _start_shared_embedded(todo: list[dict[str, Any]], concurrent: int, sdir: Path) -> Any:
    """One embedded server for all trials (instead of one llama.cpp process per trial); its URL goes
    into each trial's llm.embedded.server_url, which is not part of a run's identity."""
    settings = shared_embedded_settings(todo, concurrent)
    if settings is None:
        return None
    from skillopt_ray.llm.embedded import EmbeddedServer, EmbeddedUnavailable

    server = EmbeddedServer(**settings, log_path=sdir / "embedded_server.log")
    try:
        url = server.start()
    except EmbeddedUnavailable as err:
        raise UsageError(str(err)) from None
    print(f"sweep: one embedded server for all trials at {url} ({settings['parallel']} slots)", file=sys.stderr)
    for t in todo:
        if needs_embedded_server(t):
            t["llm"]["embedded"]["server_url"] = url
    return server


def _fit(spec: SweepSpec, todo: list[Trial], first: dict[str, Any], limit: int, sdir: Path) -> Any:
    from ray import tune

    tuner = tune.Tuner(
        tune.with_resources(_trial_fn, {"cpu": trial_cpus(first)}),
        param_space={"trial": tune.grid_search([t.data for t in todo])},
        tune_config=tune.TuneConfig(max_concurrent_trials=limit, trial_dirname_creator=lambda tr: f"trial_{tr.trial_id}"),
        run_config=tune.RunConfig(name=f"tune-{int(time.time())}", storage_path=str((sdir / "tune").resolve()),
                                  verbose=0, stop=_StopAfter(spec.interrupt_after) if spec.interrupt_after else None),
    )
    return tuner.fit()


def _key_of(config: Optional[dict[str, Any]], todo: list[Trial]) -> str:
    if config and "trial" in config:
        rd = run_dir_for(config["trial"])
        for t in todo:
            if t.run_dir == rd:
                return t.key
    return "?"


class _StopAfter:
    """Tune stopper for tests: once N trials have reported, stop the sweep as an interruption would.
    Resume does not depend on Tune's view of stopped trials: unfinished run directories are rerun."""

    def __new__(cls, n: int):  # built lazily so importing this module does not import Tune
        from ray.tune import Stopper

        class Impl(Stopper):
            def __init__(self) -> None:
                self.reported: set[str] = set()

            def __call__(self, trial_id: str, result: dict) -> bool:
                self.reported.add(trial_id)
                return False

            def stop_all(self) -> bool:
                return len(self.reported) >= n

        return Impl()


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("presets: " + ", ".join(sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))))
        return EXIT_OK
    try:
        spec, overrides = parse_args(argv)
        return run_sweep(spec, overrides)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
