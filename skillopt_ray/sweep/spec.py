"""What a sweep is: its options composed by Hydra (the `sweep` node and `seeds`), its search space as Tune
domains, and the list of trials drawn from that space.

The sweep command composes `conf/sweep_config.yaml` (the `sweep` node below) from the `sweep*` overrides, and
each trial's run config from the others, as the run command does. Presets are the Hydra config group `sweep`,
found in the top-level `sweeps/` folder (a config directory on the sweep command's search path, laid out as a
`--config-dir` is: `sweeps/sweep/NAME.yaml`) and in each `--config-dir`; `+sweep=lr`, `+sweep=[lr,gate]`. Every
`sweep.*` key is an ordinary Hydra override checked against the schema, so a misspelt option is an unknown key with the
nearest names. Swept keys live under `sweep.params` as nested config keys; a leaf is a list (every value:
a grid), a single value, or a one-key map `{choice|uniform|loguniform|randint: [...]}` (sampled).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, TypedDict, Union  # noqa: UP035 - OmegaConf's structured configs want typing.Dict

from skillopt_envs.jsontypes import JSONObject, JSONValue

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.compare.groups import norm_value

# The project's sweep definitions: a config directory whose `sweep/` group the sweep command searches after the
# user's --config-dir folders (so a user's preset of the same name wins).
SWEEPS_DIR = Path(__file__).resolve().parents[2] / "sweeps"

SAMPLED = ("choice", "uniform", "loguniform", "randint")
KINDS = ("grid",) + SAMPLED
SWEEP_CONFIG = "sweep_config"  # conf/sweep_config.yaml: the sweep command's root config
SCHEDULERS = ("none", "asha")


# ---- the schema Hydra composes -------------------------------------------------------------------


@dataclass
class AshaOptions:
    grace_period: int = 1
    reduction_factor: int = 2
    max_t: Optional[int] = None  # None: one past the trials' last training step (epochs x steps per epoch + 1)


@dataclass
class SweepOptions:
    """The `sweep` node. Presets (sweeps/sweep/NAME.yaml) set any of it: description, params, fixed, num_samples,
    seeds, the scheduler."""

    description: str = ""
    params: Dict[str, Any] = field(default_factory=dict)  # noqa: UP006
    fixed: Dict[str, Any] = field(default_factory=dict)  # noqa: UP006
    num_samples: int = 1
    max_concurrent: Optional[int] = None
    scheduler: str = "none"  # none | asha
    asha: AshaOptions = field(default_factory=AshaOptions)
    verbose: int = 1  # Tune's live trial table at 1
    report_every_s: float = 10.0
    dry_run: bool = False
    resume_stopped: bool = False
    interrupt_after: Optional[int] = None  # test hook: stop once N trials have finished their runs
    seeds: Any = 1  # a count (the config's seed, +1, ...) or a list of seeds


def register_sweep_schema() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="sweep_schema", node=SweepOptions, package="sweep")


def option_keys() -> list[str]:
    """Every key the sweep schema knows, for did-you-mean answers (`sweep.max_concurrent`, `sweep.seeds`, ...)."""

    def walk(d: Mapping[str, object], prefix: str) -> list[str]:
        out = []
        for k, v in d.items():
            out.append(prefix + k)
            if isinstance(v, dict) and k not in ("params", "fixed"):
                out += walk(v, prefix + k + ".")
        return out

    return walk({"sweep": asdict(SweepOptions())}, "")


# ---- the search space ----------------------------------------------------------------------------


@dataclass
class Param:
    """One swept key: a grid of values, or a distribution Tune samples from."""

    key: str
    kind: str  # grid | choice | uniform | loguniform | randint
    values: list[Any]  # grid / choice: the values; ranges: [lo, hi]

    def domain(self) -> Any:
        """The key's entry in Tune's search space (Tune's public search-space API)."""
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
    fixed: JSONObject  # key -> the value every trial overrides it with
    seeds: list[int]
    max_concurrent: Optional[int] = None
    interrupt_after: Optional[int] = None
    seeds_are_offsets: bool = False  # seeds=N means the config's seed, +1, ... +N-1
    num_samples: int = 1
    scheduler: str = "none"  # none | asha
    asha: dict[str, Optional[int]] = field(
        default_factory=lambda: {"grace_period": 1, "reduction_factor": 2, "max_t": None}
    )
    verbose: int = 1
    report_every_s: float = 10.0
    dry_run: bool = False
    resume_stopped: bool = False
    search_dirs: tuple[str, ...] = ()  # --config-dir: more presets (DIR/sweep/) and run configs

    @property
    def grid(self) -> dict[str, list[Any]]:
        return {k: p.values for k, p in self.params.items() if p.kind == "grid"}

    @property
    def keys(self) -> list[str]:
        return sorted(self.params)

    def sampled(self) -> bool:
        return any(p.kind in SAMPLED for p in self.params.values())


def _is_leaf(node: Any) -> bool:
    return not isinstance(node, dict) or (len(node) == 1 and next(iter(node)) in KINDS + ("grid_search",))


def flatten_keys(node: Mapping[str, JSONValue], prefix: str = "") -> JSONObject:
    """`{optimizer: {learning_rate: [2, 4]}}` -> `{"optimizer.learning_rate": [2, 4]}`; a one-key map
    named after a kind (`{uniform: [0, 1]}`) is a leaf, not a section."""
    out: JSONObject = {}
    for k, v in node.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and not _is_leaf(v):
            out.update(flatten_keys(v, key + "."))
        else:
            out[key] = v
    return out


def parse_param(key: str, spec: Any, where: str) -> Param:
    """A swept key: a list (grid), a single value, or `{kind: [args]}`."""
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
        seen: JSONObject = {}
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


# ---- the command line ----------------------------------------------------------------------------


def is_sweep_override(key: str) -> bool:
    return key == "sweep" or key.startswith("sweep.")


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(the trials' overrides, the sweep's own, the preset names) through Hydra's override parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from skillopt_ray.cli.compose import explain, split_price_overrides

    rest, _prices = split_price_overrides(overrides)  # model names in price keys are not Hydra's grammar
    try:
        parsed = OverridesParser.create().parse_overrides(rest)
    except HydraException as e:
        raise UsageError(_sampling_hint(explain(e))) from None
    own = {o.input_line for o in parsed if is_sweep_override(o.key_or_group)}
    presets: list[str] = []
    for o in parsed:
        if o.key_or_group == "sweep":
            v = o.value()
            presets += [str(x) for x in (v if isinstance(v, list) else [v])]
    return [o for o in overrides if o not in own], [o for o in overrides if o in own], presets


def _sampling_hint(message: str) -> str:
    """Hydra reads `uniform(0.1,0.9)` as a function it does not know, and `choice(a,b)` as its own multirun sweep:
    in a sweep's params both mean a distribution, which is written as a one-key map."""
    import re

    m = re.search(r"'(\+*sweep\.params\.[^'=]+=[^']*)'", message)
    if m and ("Unknown function" in message or "multirun" in message.lower()):
        key = m.group(1).split("=", 1)[0].lstrip("+")
        return (
            f"{m.group(1)}: a sampled sweep key is a one-key map, e.g. '+{key}={{uniform:[0.1,0.9]}}' "
            "(or choice, loguniform, randint; quote it for the shell); a list is a grid"
        )
    return message


def preset_names(search_dirs: tuple[str, ...] = ()) -> list[str]:
    """Every preset `+sweep=NAME` can compose: the project's sweeps/ and each --config-dir's sweep/ folder."""
    folders = [Path(d) / "sweep" for d in search_dirs] + [SWEEPS_DIR / "sweep"]
    return sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})


def _preset_hint(message: str, search_dirs: tuple[str, ...]) -> str:
    """An unknown preset is answered with every preset the search path holds (Hydra's loader only names conf/)."""
    m = re.match(r"unknown sweep preset: ([^;]+);", message)
    if not m:
        return message
    return f"unknown sweep preset: {m.group(1)}; available: {', '.join(preset_names(search_dirs)) or 'none'}"


class AshaNode(TypedDict):
    """AshaOptions as plain data."""

    grace_period: int
    reduction_factor: int
    max_t: Optional[int]


class SweepNode(TypedDict):
    """SweepOptions as plain data (the composed `sweep` node)."""

    description: str
    params: Optional[JSONObject]  # dotted or nested config key -> a list (grid) or {kind: [args]}
    fixed: Optional[JSONObject]
    num_samples: int
    max_concurrent: Optional[int]
    scheduler: str
    asha: AshaNode
    verbose: int
    report_every_s: float
    dry_run: bool
    resume_stopped: bool
    interrupt_after: Optional[int]
    seeds: Union[int, list[int]]  # as given: checked in parse_args


class SweepConfig(TypedDict):
    sweep: SweepNode


def compose_sweep(overrides: list[str], search_dirs: tuple[str, ...] = ()) -> SweepConfig:
    """The `sweep` node composed by Hydra from the sweep's own overrides, as plain data."""
    from omegaconf import OmegaConf

    from skillopt_ray.cli.compose import compose_node

    register_sweep_schema()
    try:
        cfg = compose_node(
            overrides,
            config_name=SWEEP_CONFIG,
            search_dirs=(*search_dirs, str(SWEEPS_DIR)),
            require_experiment=False,
            extra_keys=option_keys(),
        )
    except UsageError as e:
        raise UsageError(_preset_hint(_sampling_hint(str(e)), search_dirs)) from None
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def parse_args(argv: list[str], search_dirs: tuple[str, ...] = ()) -> tuple[SweepSpec, list[str]]:
    """The sweep (from the `sweep.*` and `seeds` overrides, composed by Hydra) and the trials' overrides."""
    trial_overrides, own, presets = split_overrides(argv)
    data = compose_sweep(own, search_dirs)
    opts = data["sweep"]
    seeds = opts["seeds"]
    where = "sweep " + ("preset " + "+".join(presets) if presets else "options")
    flat = flatten_keys(opts["params"] or {}, "")
    for key in flat:
        _check_swept_key(key, where)
    params = {k: parse_param(k, v, where) for k, v in flat.items()}
    if "seed" in params:
        raise UsageError("sweep the seed with sweep.seeds=N or sweep.seeds=[...], not sweep.params.seed")
    if not params and seeds == 1:
        raise UsageError(
            "nothing to sweep: give +sweep=<preset> (sweeps/sweep/), +sweep.params.<key>=[...] or sweep.seeds=N"
        )
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise UsageError(f"sweep.seeds must be >= 1, got {seeds}")
        seed_list: Optional[list[int]] = None
        count = seeds
    elif isinstance(seeds, list) and seeds and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        seed_list, count = list(dict.fromkeys(seeds)), len(set(seeds))
    else:
        raise UsageError(f"sweep.seeds must be a count (sweep.seeds=5) or a list (sweep.seeds=[1,2,3]), got {seeds!r}")
    _check_options(opts)
    a = opts["asha"]
    asha = {"grace_period": a["grace_period"], "reduction_factor": a["reduction_factor"], "max_t": a["max_t"]}
    spec = SweepSpec(
        presets,
        params,
        flatten_keys(opts["fixed"] or {}),
        seed_list or list(range(count)),
        max_concurrent=opts["max_concurrent"],
        interrupt_after=opts["interrupt_after"],
        seeds_are_offsets=seed_list is None,
        num_samples=opts["num_samples"],
        scheduler=opts["scheduler"],
        asha=asha,
        verbose=opts["verbose"],
        report_every_s=float(opts["report_every_s"]),
        dry_run=bool(opts["dry_run"]),
        resume_stopped=bool(opts["resume_stopped"]),
        search_dirs=tuple(search_dirs),
    )
    if spec.num_samples > 1 and not spec.sampled():
        raise UsageError(
            f"sweep.num_samples={spec.num_samples} repeats random draws, but every swept key is a grid: "
            "the trials would repeat one another; use sweep.seeds=N for repeats"
        )
    return spec, trial_overrides


def _check_swept_key(key: str, where: str) -> None:
    """A swept key must be a config key: `optimizer.mixed_weight.gauss` is a distribution Tune lacks, not a key."""
    from skillopt_ray.config import schema_paths, suggest_keys

    paths = set(schema_paths())
    if key in paths or key.startswith(("env.options.", "tracking.tags.", "llm.prices.")):
        return
    parent, _, leaf = key.rpartition(".")
    if parent in paths:
        raise UsageError(f"{where}: {parent}: unknown kind {leaf!r}; use a list (grid) or one of {', '.join(SAMPLED)}")
    near = suggest_keys(key)
    raise UsageError(f"{where}: {key} is not a config key" + (f"; did you mean {' or '.join(near)}?" if near else ""))


def _check_options(opts: SweepNode) -> None:
    """Ranges the schema's types cannot say."""
    if opts["scheduler"] not in SCHEDULERS:
        raise UsageError(f"sweep.scheduler must be none or asha, got {opts['scheduler']!r}")
    for key, value, minimum in (
        ("sweep.num_samples", opts["num_samples"], 1),
        ("sweep.max_concurrent", opts["max_concurrent"], 1),
        ("sweep.interrupt_after", opts["interrupt_after"], 1),
        ("sweep.verbose", opts["verbose"], 0),
        ("sweep.asha.grace_period", opts["asha"]["grace_period"], 1),
        ("sweep.asha.reduction_factor", opts["asha"]["reduction_factor"], 2),
        ("sweep.asha.max_t", opts["asha"]["max_t"], 1),
    ):
        if value is not None and value < minimum:
            raise UsageError(f"{key} must be >= {minimum}, got {value}")


# ---- trials drawn from the space -----------------------------------------------------------------


def search_space(spec: SweepSpec, seeds: list[int]) -> dict[str, Any]:
    """Tune's param_space: one entry per swept key, and the seeds as a grid."""
    from ray import tune

    space = {k: spec.params[k].domain() for k in spec.keys}
    space["seed"] = tune.grid_search(list(seeds))
    return space


def expand(space: dict[str, Any], num_samples: int, seed: int) -> list[dict[str, Any]]:
    """Every trial's config, in order: each sample draws the sampled keys once (each Tune domain's own
    `sample`, from one generator seeded with `seed`, so the same sweep draws the same values) and crosses
    the draw with every grid value and seed, so the seeds of one draw form a group."""
    import numpy as np

    rng = np.random.default_rng(seed)
    grid_keys = [k for k, v in space.items() if isinstance(v, dict) and "grid_search" in v]
    sampled = [k for k in space if k not in grid_keys]
    out = []
    for _ in range(num_samples):
        draw = {k: _plain(space[k].sample(random_state=rng)) for k in sampled}
        for combo in itertools.product(*(space[k]["grid_search"] for k in grid_keys)):
            out.append({**draw, **dict(zip(grid_keys, combo))})
    return out


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (they go into overrides, JSON and run names)."""
    return value.item() if hasattr(value, "item") else value


def sample_seed(spec: SweepSpec, overrides: list[str]) -> int:
    return int(hashlib.sha256(spec_blob(spec, overrides).encode()).hexdigest()[:8], 16)


def spec_blob(spec: SweepSpec, overrides: list[str]) -> str:
    space = {k: p.describe() for k, p in sorted(spec.params.items())}
    blob: JSONObject = {"grid": space, "fixed": spec.fixed, "seeds": spec.seeds, "overrides": sorted(overrides)}
    if spec.num_samples > 1:
        blob["num_samples"] = spec.num_samples
    return json.dumps(blob, sort_keys=True, default=str)


def sweep_name(spec: SweepSpec, overrides: list[str], experiment: str) -> str:
    label = "+".join(Path(p).stem for p in spec.presets) or "custom"
    return f"{experiment}-{label}-{hashlib.sha256(spec_blob(spec, overrides).encode()).hexdigest()[:8]}"
