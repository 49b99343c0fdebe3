"""The sweep's trials: each point of the search space composed into a run config now (paths resolved, one trial
per run directory), the resources a trial reserves, and what the sweep sets in every trial's config."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypedDict

from skillopt_ray.cli import (
    Checked,
    UsageError,
    absolute,
    check_skill_files,
    compose,
    compose_node,
    needs_embedded_server,
    plain,
    run_dir_for,
)
from skillopt_ray.cli.identity import identity_record
from skillopt_ray.compare.groups import norm_value
from skillopt_ray.compare.records import run_finished
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.skill_files import SkillTexts
from skillopt_ray.runs.records import Origin
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.sweep.spec import SweepSpec, expand, option_keys, sample_seed, search_space


# the result a scheduler stopped a trial on: the step and its selection score (sweep_report.METRIC)
class StopPoint(TypedDict):
    step: Optional[int]
    selection_score: Optional[float]


# who stopped a trial, and where (a trial row's `stopped`)
class StoppedBy(TypedDict):
    by: str
    step: Optional[int]
    selection_score: Optional[float]


class _TrialRowBase(TypedDict):
    key: str
    params: dict[str, str]
    seed: int
    run_dir: str
    status: str  # new | finished | stopped | unfinished


class TrialRow(_TrialRowBase, total=False):
    """One trial in the sweep's record (sweep.json `trials`); a stopped trial says who stopped it."""

    stopped: Optional[StoppedBy]


class _TrialPlanBase(TypedDict):
    data: PlainConfig  # the trial's prepared config (the plain config tree)
    key: str
    run_dir: str


class TrialPlan(_TrialPlanBase, total=False):
    """What a Tune trial runs: its config, key, run directory and (when planned by the sweep) provenance and its
    checked config (the same as `data`, checked before Tune started)."""

    origin: Origin  # the sweep's command line and the overrides that compose the trial
    checked: Checked


class SweepContext(TypedDict):
    """What every trial of a sweep shares: its name, swept keys, overrides and MLflow parent."""

    name: str
    keys: list[str]
    overrides: list[str]
    fixed: dict[str, Any]  # dotted key -> any config value
    parent_run_id: Optional[str]
    server_url: Optional[str]
    stopped: list[str]
    resume_stopped: bool
    search_dirs: list[str]


class EmbeddedSettings(TypedDict):
    """The arguments of the one embedded server a sweep's trials share."""

    model_path: str
    ctx_size: int
    threads: int
    parallel: int
    startup_timeout_s: float


@dataclass
class Trial:
    key: str  # e.g. "optimizer.learning_rate=4,seed=42"
    params: dict[str, str]  # swept key -> the run's resolved value, normalised
    seed: int
    data: PlainConfig
    run_dir: Path
    values: dict[str, Any] = field(default_factory=dict)  # swept key -> the value Tune hands the trial
    status: str = "new"  # new | finished | stopped | unfinished
    checked: Optional[Checked] = None  # set by the sweep (cli.preflight) for a trial it will run
    skills: Optional[SkillTexts] = None  # its skill documents as read when it was planned (see read_skills)

    def finished(self) -> bool:
        return run_finished(self.run_dir)


def _override(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value) if isinstance(value, (list, dict)) else value}"


def _get(data: PlainConfig, dotted: str) -> Any:
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
) -> tuple[PlainConfig, dict[str, str]]:
    """A trial's run config, composed and validated once (paths resolved), and its swept values as the run has them.
    `values["seed"]` None: the config's own seed (the sweep's first trial, which tells the seeds of the others)."""
    ovr = (
        overrides
        + [_override(k, v) for k, v in fixed.items()]
        + [_override(k, values[k]) for k in keys]
        + ([f"seed={int(values['seed'])}"] if values.get("seed") is not None else [])
    )
    # the sweep's own keys are known here too, so `seeds=3` is answered with sweep.seeds
    data = plain(absolute(compose(ovr, search_dirs=search_dirs, extra_keys=option_keys())))
    return data, {k: norm_value(_get(data, k)) for k in keys}


def read_skills(data: PlainConfig) -> Optional[SkillTexts]:
    """A trial's skill documents, read once when it is planned (its run directory's name hashes them; its check
    takes them as read), or None when one cannot be read: a dry run still lists the trial, its check says why."""
    try:
        return check_skill_files(data)
    except UsageError:
        return None


def plan_trials(spec: SweepSpec, overrides: list[str]) -> list[Trial]:
    """Every trial Tune will run, composed and resolved now (one per run directory): each composed and validated
    once. Seeds given as offsets (sweep.seeds=N) count from the config's own seed, which the first trial (offset 0)
    is composed with: no composition of its own."""
    keys = spec.keys
    trials: list[Trial] = []
    seen: dict[Path, Trial] = {}
    base_seed: Optional[int] = None
    for values in expand(search_space(spec, spec.seeds), spec.num_samples, sample_seed(spec, overrides)):
        if spec.seeds_are_offsets:
            if base_seed is None and values["seed"] != 0:  # no offset 0 first: not made by parse_args
                base_seed = int(compose_node(overrides, search_dirs=spec.search_dirs, extra_keys=option_keys()).seed)
            values = {**values, "seed": None if base_seed is None else base_seed + int(values["seed"])}
        data, params = compose_trial(overrides, spec.fixed, values, keys, spec.search_dirs)
        seed = int(data["seed"])
        if base_seed is None and spec.seeds_are_offsets:
            base_seed = seed
        skills = read_skills(data)
        rd = run_dir_for(data, identity_record(data, skills) if skills is not None else None)
        if rd in seen:  # two draws (or spellings) that make the same run: one trial
            continue
        t = Trial(trial_key(params, seed), params, seed, data, rd, {k: values[k] for k in keys}, skills=skills)
        seen[rd] = t
        trials.append(t)
    return trials


def training_steps(data: PlainConfig) -> int:
    """A run's number of training steps (epochs x steps per epoch), from its train split's size: ASHA's max_t."""
    import skillopt_envs

    env = data["env"]
    n = len(skillopt_envs.make(env["name"], env).load_split(env["train_split"]))
    if env.get("limit_train"):
        n = min(n, int(env["limit_train"]))
    return int(data["optimizer"]["epochs"]) * max(1, math.ceil(n / int(data["optimizer"]["batch_size"])))


def asha_max_t(trials: list[PlainConfig]) -> int:
    """ASHA's max_t when not given: one past the longest run's last step. ASHA stops a trial whose step reaches
    max_t, and a run at its last step still has its epoch boundary and final tests to do; the rungs are then
    the runs' own steps (not 14 rungs up to 10,000)."""
    return max(training_steps(d) for d in trials) + 1


def trial_cpus(data: PlainConfig) -> float:
    """What a trial reserves: a quarter core per env actor (or what the config asks for); its actors then ask 0 CPUs."""
    r = data["ray"]
    return round(max(0.25, r["env_actors"] * max(float(r["actor_num_cpus"]), 0.25)), 2)


def max_concurrent_trials(data: PlainConfig, total_cpus: float, requested: Optional[int]) -> int:
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


def shared_embedded_settings(trials: list[PlainConfig], concurrent: int) -> Optional[EmbeddedSettings]:
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
    return EmbeddedSettings(
        model_path=e["model_path"],
        ctx_size=e["ctx_size"] * n,
        threads=e["threads"],
        parallel=e["parallel"] * n,
        startup_timeout_s=e["startup_timeout_s"],
    )


def prepare(data: PlainConfig, ctx: SweepContext, params: dict[str, str], key: str, seed: int) -> PlainConfig:
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


def _status(t: Trial, previous: dict[str, TrialRow]) -> str:
    if t.finished():
        return "finished"
    prev = previous.get(str(t.run_dir))
    if prev is not None and prev.get("status") == "stopped":
        return "stopped"
    return "unfinished" if RunDir(t.run_dir).state_path.exists() else "new"
