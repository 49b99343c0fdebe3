"""Sweeps on Ray Tune: the swept config keys are Tune's search space, each trial one full training run
through the same driver code as the CLI, reporting to Tune after every training step.

    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr seeds=5 [hydra overrides ...]
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=[lr,gate] seeds=3 sweep.max_concurrent=2
    python -m skillopt_ray.sweep +experiment=alfworld 'sweep.params.optimizer.mixed_weight=uniform(0.1,0.9)' sweep.num_samples=4
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr seeds=3 sweep.scheduler=asha
    python -m skillopt_ray.sweep +experiment=alfworld +sweep=lr seeds=3 --dry-run

Search space: a list is a grid (`tune.grid_search`); `choice(a,b,...)`, `uniform(lo,hi)`,
`loguniform(lo,hi)`, `randint(lo,hi)` (hi excluded, as in Tune) are sampled, `sweep.num_samples`
times over the grid. Seeds are one more grid key. Sampling is seeded from the sweep's name, so a
rerun draws the same values. Presets live in `sweeps/*.yaml` (see sweeps/README.md).

Every trial's config is composed and its paths resolved here, before Tune starts (Tune changes
trial working directories). The same command resumes: a trial whose run finished reports its
recorded steps again and ends at once; unfinished ones resume their run directory and its cached
model calls; trials a scheduler stopped stay stopped unless `sweep.resume_stopped=true`.

Options: sweep.max_concurrent=N, sweep.num_samples=N, sweep.scheduler=none|asha (ASHA on the
per-step selection score, mode max; sweep.asha.grace_period, .reduction_factor, .max_t),
sweep.verbose=0..3 (Tune's live trial table at 1), sweep.dry_run=true or --dry-run (list the trials
and exit without starting Ray), sweep.resume_stopped=true.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import math
import os
import re
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
from skillopt_ray.tracking import TrackingError
from skillopt_ray.utils.io import atomic_write_json

PRESETS_DIR = Path(__file__).resolve().parent.parent / "sweeps"
SAMPLED = ("choice", "uniform", "loguniform", "randint")
KINDS = ("grid",) + SAMPLED
METRIC = "selection_score"  # what a scheduler compares: the current skill's selection score after each step
REPORT_COLUMNS = {
    "step": "step",
    "selection_score": "selection",
    "candidate_score": "candidate",
    "best_selection_score": "best selection",
    "test_hard_best": "test hard",
}


@dataclass
class Param:
    """One swept key: a grid of values, or a distribution Tune samples from."""

    key: str
    kind: str  # grid | choice | uniform | loguniform | randint
    values: list[Any]  # grid / choice: the values; ranges: [lo, hi]

    def domain(self) -> Any:
        from ray import tune

        if self.kind == "grid":
            return tune.grid_search(list(self.values))
        if self.kind == "choice":
            return tune.choice(list(self.values))
        lo, hi = self.values
        return {"uniform": tune.uniform, "loguniform": tune.loguniform, "randint": tune.randint}[self.kind](lo, hi)

    def describe(self) -> str:
        if self.kind == "grid":
            return "grid [" + ", ".join(norm_value(v) for v in self.values) + "]"
        return f"{self.kind}(" + ", ".join(norm_value(v) for v in self.values) + ")"


@dataclass
class SweepSpec:
    presets: list[str]
    params: dict[str, Param]
    fixed: dict[str, Any]
    seeds: list[int]
    max_concurrent: Optional[int] = None
    interrupt_after: Optional[int] = None
    seeds_are_offsets: bool = False  # seeds=N means the config's seed, +1, ... +N-1
    num_samples: int = 1
    scheduler: str = "none"  # none | asha
    asha: dict[str, int] = field(default_factory=lambda: {"grace_period": 1, "reduction_factor": 2, "max_t": 10_000})
    verbose: int = 1
    report_every_s: float = 10.0
    dry_run: bool = False
    resume_stopped: bool = False

    @property
    def grid(self) -> dict[str, list[Any]]:
        return {k: p.values for k, p in self.params.items() if p.kind == "grid"}

    @property
    def keys(self) -> list[str]:
        return sorted(self.params)

    def sampled(self) -> bool:
        return any(p.kind in SAMPLED for p in self.params.values())


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


# ---- parsing -------------------------------------------------------------------------------------

_CALL = re.compile(r"^\s*([A-Za-z_]+)\s*\((.*)\)\s*$", re.S)  # kind(args); the kind is checked below


def parse_param(key: str, spec: Any, where: str) -> Param:
    """A swept key from a preset or the command line: a list (grid), `{kind: args}` or `kind(args)`."""
    if isinstance(spec, str) and _CALL.match(spec):
        kind, args = _CALL.match(spec).groups()  # type: ignore[union-attr]
        spec = {kind: yaml.safe_load(f"[{args}]")}
    if isinstance(spec, dict) and len(spec) == 1:
        ((kind, args),) = spec.items()
        if kind == "grid_search":
            kind = "grid"
    elif isinstance(spec, list):
        kind, args = "grid", spec
    else:
        kind, args = "grid", [spec]
    if kind not in KINDS:
        raise UsageError(f"{where}: {key}: unknown kind {kind!r}; use a list (grid) or one of {', '.join(SAMPLED)}")
    if not isinstance(args, list) or not args:
        raise UsageError(f"{where}: {key}: {kind} needs a non-empty list of values")
    if kind in ("grid", "choice"):
        seen: dict[str, Any] = {}
        for v in args:  # 4 and 4.0 are one value
            seen.setdefault(norm_value(v), v)
        return Param(key, kind, list(seen.values()))
    if (
        len(args) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args)
        or not args[0] < args[1]
    ):
        raise UsageError(f"{where}: {key}: {kind} needs two numbers lo < hi, got {args!r}")
    if kind == "loguniform" and args[0] <= 0:
        raise UsageError(f"{where}: {key}: loguniform needs lo > 0, got {args[0]}")
    if kind == "randint" and not all(isinstance(v, int) for v in args):
        raise UsageError(f"{where}: {key}: randint needs integers (lo included, hi excluded), got {args!r}")
    return Param(key, kind, list(args))


def load_preset(name: str) -> tuple[dict[str, Param], dict[str, Any], int]:
    path = Path(name) if name.endswith((".yaml", ".yml")) else PRESETS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PRESETS_DIR.glob("*.yaml")))
        raise UsageError(f"unknown sweep preset {name!r}; available: {known} (or a path to a YAML file)")
    doc = yaml.safe_load(path.read_text()) or {}
    params = doc.get("params") or {}
    if not isinstance(params, dict) or not params:
        raise UsageError(f"sweep preset {path}: 'params' must map config keys to a list of values or a range")
    samples = doc.get("num_samples", 1)
    if not isinstance(samples, int) or samples < 1:
        raise UsageError(f"sweep preset {path}: num_samples must be an integer >= 1")
    return (
        {k: parse_param(k, v, f"sweep preset {path.name}") for k, v in params.items()},
        dict(doc.get("fixed") or {}),
        samples,
    )


def _value(text: str) -> Any:
    return yaml.safe_load(text)


def _int_option(key: str, text: str, minimum: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise UsageError(f"{key} must be an integer, got {text!r}") from None
    if v < minimum:
        raise UsageError(f"{key} must be >= {minimum}, got {v}")
    return v


def _bool_option(key: str, text: str) -> bool:
    v = _value(text)
    if not isinstance(v, bool):
        raise UsageError(f"{key} must be true or false, got {text!r}")
    return v


def parse_args(argv: list[str]) -> tuple[SweepSpec, list[str]]:
    """Split sweep arguments from the Hydra overrides that every trial shares."""
    presets: list[str] = []
    extra: dict[str, Param] = {}
    seeds: Any = 1
    opts: dict[str, Any] = {}
    asha: dict[str, int] = {}
    samples: Optional[int] = None
    overrides = []
    for arg in argv:
        if arg == "--dry-run":
            opts["dry_run"] = True
            continue
        key, eq, val = arg.partition("=")
        bare = key.lstrip("+")
        if not eq or not (bare in ("sweep", "seeds") or bare.startswith("sweep.")):
            overrides.append(arg)
        elif bare == "sweep":
            v = _value(val)
            presets += [str(x) for x in (v if isinstance(v, list) else str(v).split(","))]
        elif bare == "seeds":
            seeds = _value(val)
        elif bare.startswith("sweep.params."):
            k = bare[len("sweep.params.") :]
            extra[k] = parse_param(k, val if _CALL.match(val) else _value(val), "command line")
        elif bare == "sweep.max_concurrent":
            opts["max_concurrent"] = _int_option(bare, val, 1)
        elif bare == "sweep.interrupt_after":  # test hook: stop once N trials have reported
            opts["interrupt_after"] = _int_option(bare, val, 1)
        elif bare == "sweep.num_samples":
            samples = _int_option(bare, val, 1)
        elif bare == "sweep.scheduler":
            if val not in ("none", "asha"):
                raise UsageError(f"sweep.scheduler must be none or asha, got {val!r}")
            opts["scheduler"] = val
        elif bare in ("sweep.asha.grace_period", "sweep.asha.reduction_factor", "sweep.asha.max_t"):
            asha[bare.rsplit(".", 1)[1]] = _int_option(bare, val, 2 if bare.endswith("reduction_factor") else 1)
        elif bare == "sweep.verbose":
            opts["verbose"] = _int_option(bare, val, 0)
        elif bare == "sweep.report_every_s":
            opts["report_every_s"] = float(val)
        elif bare in ("sweep.dry_run", "sweep.resume_stopped"):
            opts[bare.split(".", 1)[1]] = _bool_option(bare, val)
        else:
            raise UsageError(f"unknown sweep option {bare!r}; see python -m skillopt_ray.sweep --help")
    params: dict[str, Param] = {}
    fixed: dict[str, Any] = {}
    preset_samples = 1
    for p in presets:
        g, f, n = load_preset(p)
        params.update(g)
        fixed.update(f)
        preset_samples = max(preset_samples, n)
    params.update(extra)
    if "seed" in params:
        raise UsageError("sweep the seed with seeds=N or seeds=[...], not sweep.params.seed")
    if not params and seeds == 1:
        raise UsageError("nothing to sweep: give +sweep=<preset> (see sweeps/), sweep.params.<key>=[...] or seeds=N")
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise UsageError(f"seeds must be >= 1, got {seeds}")
        seed_list: Optional[list[int]] = None
        count = seeds
    elif isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds):
        seed_list, count = list(dict.fromkeys(seeds)), len(set(seeds))
    else:
        raise UsageError(f"seeds must be a count (seeds=5) or a list (seeds=[1,2,3]), got {seeds!r}")
    spec = SweepSpec(
        presets, params, fixed, seed_list or list(range(count)), seeds_are_offsets=seed_list is None, **opts
    )
    spec.num_samples = samples if samples is not None else preset_samples
    spec.asha.update(asha)
    if spec.num_samples > 1 and not spec.sampled():
        raise UsageError(
            f"sweep.num_samples={spec.num_samples} repeats random draws, but every swept key is a grid: "
            "the trials would repeat one another; use seeds=N for repeats"
        )
    return spec, overrides


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


def search_space(spec: SweepSpec, seeds: list[int]) -> dict[str, Any]:
    """Tune's param_space: one entry per swept key, and the seeds as a grid."""
    from ray import tune

    space = {k: spec.params[k].domain() for k in spec.keys}
    space["seed"] = tune.grid_search(list(seeds))
    return space


def sample_seed(spec: SweepSpec, overrides: list[str]) -> int:
    return int(hashlib.sha256(_spec_blob(spec, overrides).encode()).hexdigest()[:8], 16)


def expand(space: dict[str, Any], num_samples: int, seed: int) -> list[dict[str, Any]]:
    """The configs Tune's BasicVariantGenerator(random_state=seed, constant_grid_search=True) produces
    for this space, in order: each sample draws the sampled keys once and crosses them with every grid
    value and seed, so the seeds of one draw form a group."""
    from ray.tune.search.sample import _BackwardsCompatibleNumpyRng
    from ray.tune.search.variant_generator import generate_variants

    rng = _BackwardsCompatibleNumpyRng(seed)
    out = []
    for _ in range(num_samples):
        for _resolved, spec in generate_variants(
            {"config": copy.deepcopy(space)}, constant_grid_search=True, random_state=rng
        ):
            out.append(dict(spec["config"]))
    return out


def compose_trial(
    overrides: list[str], fixed: dict[str, Any], values: dict[str, Any], keys: list[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    ovr = (
        overrides
        + [_override(k, v) for k, v in fixed.items()]
        + [_override(k, values[k]) for k in keys]
        + [f"seed={int(values['seed'])}"]
    )
    _obj, data = typed(compose(ovr))
    data = resolve_paths(data)
    return data, {k: norm_value(_get(data, k)) for k in keys}


def plan_trials(spec: SweepSpec, overrides: list[str]) -> list[Trial]:
    """Every trial Tune will run, composed and resolved now (one per run directory)."""
    base_data = resolve_paths(typed(compose(overrides))[1])
    base_seed = int(base_data["seed"])
    seeds = [base_seed + s for s in spec.seeds] if spec.seeds_are_offsets else spec.seeds
    keys = spec.keys
    trials: list[Trial] = []
    seen: dict[Path, Trial] = {}
    for values in expand(search_space(spec, seeds), spec.num_samples, sample_seed(spec, overrides)):
        data, params = compose_trial(overrides, spec.fixed, values, keys)
        rd = run_dir_for(data)
        if rd in seen:  # two draws (or spellings) that make the same run: one trial
            continue
        t = Trial(
            trial_key(params, int(values["seed"])), params, int(values["seed"]), data, rd, {k: values[k] for k in keys}
        )
        seen[rd] = t
        trials.append(t)
    return trials


def _spec_blob(spec: SweepSpec, overrides: list[str]) -> str:
    space = {k: p.describe() for k, p in sorted(spec.params.items())}
    blob: dict[str, Any] = {"grid": space, "fixed": spec.fixed, "seeds": spec.seeds, "overrides": sorted(overrides)}
    if spec.num_samples > 1:
        blob["num_samples"] = spec.num_samples
    return json.dumps(blob, sort_keys=True, default=str)


def sweep_name(spec: SweepSpec, overrides: list[str], experiment: str) -> str:
    label = "+".join(Path(p).stem for p in spec.presets) or "custom"
    return f"{experiment}-{label}-{hashlib.sha256(_spec_blob(spec, overrides).encode()).hexdigest()[:8]}"


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
    s = json.loads((run_dir / "summary.json").read_text())
    sel = s["selection"]
    final_sel = sel.get("final") if sel.get("final") is not None else (last or {}).get(METRIC, sel.get("best"))
    return {
        **(last or {"step": 0, "epoch": 0, "candidate_score": math.nan, "accepted": 0, "action": "none"}),
        METRIC: float(final_sel),
        "best_selection_score": float(sel["best"]),
        "test_hard_best": float(s["test"]["best"]["hard"]),
        "test_soft_best": float(s["test"]["best"]["soft"]),
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
        data, params = compose_trial(ctx["overrides"], ctx["fixed"], config, keys)
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
                outcome.update(execute(copy.deepcopy(plan["data"]), run_dir))
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
    try:
        info = json.loads((run_dir / "mlflow_run.json").read_text())
    except (OSError, ValueError):
        return
    if not info.get("run_id") or not info.get("tracking_uri"):
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
    return "unfinished" if (t.run_dir / "state.json").exists() else "new"


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

    def write_meta() -> None:
        atomic_write_json(
            meta_path,
            {
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
            },
        )

    write_meta()
    if parent.enabled:
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
    write_meta()
    report = sweep_comparison(sdir)
    report.write(sdir / "comparison", force=True)  # the sweep's own folder, rewritten on every rerun
    if parent.enabled:
        best = report.best()
        if best is not None:
            parent.client.set_tag(parent.run_id, "best_config", json.dumps(best["params"]))
            parent.client.set_tag(parent.run_id, "best_config_rule", best["rule"])
            parent.client.set_tag(parent.run_id, "best_config_tied", json.dumps(best["tied"]))
            parent.tracker.log_metrics(
                {
                    "best_mean_selection_score": best["best_selection_score_mean"],
                    "best_mean_test_hard": best["test_hard_best_mean"],
                },
                0,
            )
        for f in sorted((sdir / "comparison").iterdir()):
            parent.client.log_artifact(parent.run_id, str(f), "comparison")
        done = all(t.status in ("finished", "stopped") for t in trials)
        parent.tracker.finish("FAILED" if failed else "FINISHED" if done else "KILLED")
    print(report.markdown())
    print(f"sweep directory: {sdir}")
    if parent.enabled:
        print(f"mlflow parent run: {parent.run_id} (tracking uri {parent.uri})")
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
    os.environ["RAY_CHDIR_TO_TRIAL_DIR"] = "0"
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
    }
    plans = {}
    for t in trials:
        plans[signature({**t.values, "seed": t.seed}, spec.keys)] = {
            "data": prepare(t.data, ctx, t.params, t.key, t.seed),
            "key": t.key,
            "run_dir": str(t.run_dir),
        }
    seeds = sorted({t.seed for t in trials}, key=[t.seed for t in trials].index)
    try:
        results, stops = _fit(
            spec, search_space(spec, seeds), plans, ctx, first, limit, sdir, sample_seed(spec, overrides)
        )
    finally:
        if embedded is not None:
            embedded.stop()
    by_dir = {str(t.run_dir): t for t in trials}
    failed = []
    for r in results:
        m = r.metrics or {}
        t = by_dir.get(m.get("run_dir", "")) or by_dir.get(
            plans.get(signature(r.config, spec.keys), {}).get("run_dir", "")
        )
        if r.error is not None:
            failed.append(f"{t.key if t else '?'}: {str(r.error).strip().splitlines()[-1][:300]}")
            continue
        stop = stops.get(m.get("trial_id", ""))
        if t is None or t.finished():
            continue
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
    plans: dict[str, Any],
    ctx: dict[str, Any],
    first: dict[str, Any],
    limit: int,
    sdir: Path,
    seed: int,
    trainable: Any = None,
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """Tune over `space`; returns the result grid and {trial id: the result a scheduler stopped it on}."""
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # the classic reporter: a trial table with our columns
    from ray import tune
    from ray.tune import CLIReporter
    from ray.tune.search.basic_variant import BasicVariantGenerator

    stops: dict[str, dict[str, Any]] = {}
    scheduler = _asha(spec, stops) if spec.scheduler == "asha" else None
    keys = spec.keys
    reporter = CLIReporter(
        parameter_columns={**{k: _short(k) for k in keys}, "seed": "seed"},
        metric_columns=dict(REPORT_COLUMNS),
        max_report_frequency=max(1, int(spec.report_every_s)),
        max_progress_rows=100,
        max_error_rows=20,
        sort_by_metric=False,
    )
    stopper = _StopAfter(spec.interrupt_after) if spec.interrupt_after else None
    fn = trainable or tune.with_parameters(_trainable, plans=plans, ctx=ctx)
    tuner = tune.Tuner(
        tune.with_resources(fn, {"cpu": trial_cpus(first)}),
        param_space=space,
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode="max",
            num_samples=spec.num_samples,
            scheduler=scheduler,
            reuse_actors=False,
            # our own generator: seeded (a rerun draws the same values), one draw per sample across the
            # grid and the seeds, and it carries the concurrency cap (Tune ignores max_concurrent_trials beside it)
            search_alg=BasicVariantGenerator(random_state=seed, max_concurrent=limit, constant_grid_search=True),
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
            stop=stopper,
        ),
    )
    return tuner.fit(), stops


def _asha(spec: SweepSpec, stops: dict[str, dict[str, Any]]) -> Any:
    """ASHA on the per-step selection score (time = training step), remembering whom it stopped."""
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    class RecordingASHA(ASHAScheduler):
        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
            action = super().on_trial_result(tune_controller, trial, result)
            if action == TrialScheduler.STOP and not result.get("finished"):
                stops[trial.trial_id] = {"step": result.get("step"), METRIC: result.get(METRIC)}
            return action

    a = spec.asha
    return RecordingASHA(
        time_attr="step", max_t=a["max_t"], grace_period=a["grace_period"], reduction_factor=a["reduction_factor"]
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
    except TrackingError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
