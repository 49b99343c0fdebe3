"""Compose and validate the configuration: Hydra over `conf/` with the typed schema, errors as one line.

`compose(overrides)` is the same composition the Hydra application does (same search path, same
override grammar), validated once into the typed `Config`; `compose_node` is the composition alone (Hydra's
node, for the sweep command's own config) and `typed(node)` validates a node Hydra composed; `absolute` (and
`resolve_paths` for plain data) makes paths absolute before anything crosses into actors or Tune trials;
`plain(config)` is the same config as plain data.

Prices are set per model name (`llm.prices.<model>.input_per_mtok=0.15`), and model names such as
`gpt-5.4-mini` or `Qwen/Qwen2.5-7B` are not keys Hydra's override grammar can spell, so those
overrides are taken out before Hydra sees them (`split_price_overrides`) and put back into the
composed config (`apply_prices`).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional, cast

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.schema import Config

CONF_DIR = Path(os.environ.get("SKILLOPT_CONF_DIR", Path(__file__).resolve().parent.parent.parent / "conf"))
CONFIG_NAME = "config"

_PRICE = re.compile(r"^(?:\+{1,2}|~)?llm\.prices\.(?P<model>.+)\.(?P<field>[^.=]+)=(?P<value>.*)$")

# maps whose entries are free (benchmark options, run tags, a sweep's keys): a new entry there does need `+`
_FREE_MAPS = ("env.options", "tracking.tags", "sweep.params", "sweep.fixed")


def experiments(conf_dir: Optional[Path] = None) -> list[str]:
    return sorted(p.stem for p in ((conf_dir or CONF_DIR) / "experiment").glob("*.yaml"))


PriceOverride = tuple[str, str, float]


def refuse_repeated_keys(overrides: Iterable[str]) -> None:
    """A key set twice on a command line (`seed=1 seed=2`) is refused: Hydra would silently keep the last value."""
    first: dict[str, str] = {}
    for o in overrides:
        key = re.sub(r"^(\+\+|\+|~)", "", o.split("=", 1)[0])
        if key in first:
            raise UsageError(f"{key} is given twice ({first[key]} and {o}); give each key once")
        first[key] = o


def split_price_overrides(overrides: Iterable[str]) -> tuple[list[str], list[PriceOverride]]:
    """(the other overrides, [(model, field, value)]) with each price checked (unknown field, not a number)."""
    from skillopt_ray.config import ConfigError, parse_price

    rest: list[str] = []
    prices: list[PriceOverride] = []
    for o in overrides:
        m = _PRICE.match(o)
        if not m:
            rest.append(o)
            continue
        try:
            field, value = parse_price(m["model"], m["field"], m["value"].strip().strip("'\""))
        except ConfigError as e:
            raise UsageError(str(e)) from None
        prices.append((m["model"], field, value))
    return rest, prices


def apply_prices(cfg: Any, prices: list[PriceOverride]) -> None:
    """Put price overrides into a composed config (a model the presets do not name gets a new entry)."""
    from omegaconf import open_dict

    from skillopt_ray.config import PriceConfig

    with open_dict(cfg):
        for model, field, value in prices:
            if model not in cfg.llm.prices:
                cfg.llm.prices[model] = PriceConfig()
            cfg.llm.prices[model][field] = value


def _flat(text: object) -> str:
    return " ".join(str(text).split())


def explain(exc: BaseException, conf_dir: Optional[Path] = None, extra_keys: Iterable[str] = ()) -> str:
    """A Hydra or OmegaConf composition error as one line that names the key and what to do.

    `extra_keys`: keys of a root config beyond the run schema (the sweep command's `sweep.*`), for did-you-mean."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = exc.__cause__ or exc.__context__
    unknown = (ConfigKeyError, ConfigAttributeError)
    if isinstance(cause, unknown) or isinstance(exc, unknown):
        said = _unknown_key(exc, cause if isinstance(cause, unknown) else exc, extra_keys)
        if said:
            return said
    text = _flat(exc)
    if isinstance(exc, MissingConfigException) or "Could not find" in text or "Could not load" in text:
        m = re.search(r"Could not (?:find|load) '([^']+)/([^']+)'", text)
        if m:
            group, name = m.group(1), m.group(2)
            if group.startswith("hydra/"):  # Hydra's own groups: plugins, not files of conf/
                kind = group.split("/", 1)[1]
                return (
                    f"unknown {group}: {name}; installed: {', '.join(hydra_group_options(group)) or 'none'} "
                    f"(another {kind} is a Hydra plugin to install first, e.g. pip install hydra-{name}-{kind})"
                )
            options = sorted(p.stem for p in ((conf_dir or CONF_DIR) / group).glob("*.yaml"))
            what = "experiment" if group == "experiment" else f"{group} preset"
            return f"unknown {what}: {name}; available: {', '.join(options) or 'none'}"
    if cause is not None and str(cause).strip():
        text += ": " + _flat(cause).split(" full_key:")[0]
    text = text.split(" Config search path")[0].split(" See https://hydra.cc")[0]
    if "does not support sweep type" in text:
        kind = text.rsplit(":", 1)[-1].strip().lower().replace("_sweep", "")
        return (
            f"{kind}() needs a sweeper that samples (e.g. hydra-optuna-sweeper, hydra/sweeper=optuna) or python -m "
            "skillopt_ray.sweep; Hydra's basic sweeper runs lists, range() and glob()"
        )
    ambiguous = re.search(r"Ambiguous value for argument '([^']+)'", text)
    if ambiguous:  # Hydra's advice reads "1. ... 2. ... 3. ... --multirun" with escaped quotes: said once, plainly
        arg = ambiguous.group(1)
        key, _, values = arg.partition("=")
        return (
            f"{arg} lists several values: add -m to run every combination (a multirun), or write "
            f"{key}=[{values}] for a list value, or {key}='\"{values}\"' for a string"
        )
    if "sweep" in text.lower() and "--multirun" in text:
        return f"{text}; add -m to run every combination"
    return f"invalid configuration: {text[:400]}"


def _unknown_key(exc: BaseException, err: BaseException, extra_keys: Iterable[str]) -> str:
    """The line for a key the schema does not have ("" when the error names none)."""
    from skillopt_ray.config import suggest_keys

    key = str(getattr(err, "full_key", "") or "")
    if not key:
        m = re.search(r"override '([^']+)'", str(exc))
        key = m.group(1) if m else ""
    if not key or not ("not in" in str(err) or "is not in struct" in str(err)):
        return ""
    for free in _FREE_MAPS:
        if key.startswith(free + "."):
            return f"{key} is not set yet: {free} holds free entries, add one with +{key}=..."
    if key.split(".", 1)[0] == "sweep" and not extra_keys:  # the sweep command's presets and options
        return (
            f"{key} is an option of the sweep command: run python -m skillopt_ray.sweep with the same "
            "overrides (python -m skillopt_ray runs one configuration)"
        )
    near = _near_extra(key, list(extra_keys)) or suggest_keys(key)
    hint = f"; did you mean {' or '.join(near)}?" if near else "; see --cfg job for the valid keys"
    return f"unknown key {key}{hint}"


def _near_extra(key: str, extra: list[str]) -> list[str]:
    """Keys of the extra schema close to `key`: by spelling, or the same last part (`seeds` -> `sweep.seeds`)."""
    import difflib

    leaf = key.rsplit(".", 1)[-1]
    same_leaf = [k for k in extra if k.rsplit(".", 1)[-1] == leaf]
    return same_leaf or difflib.get_close_matches(key, extra, n=3, cutoff=0.6)


def hydra_group_options(group: str) -> list[str]:
    """The options Hydra knows for one of its own config groups (hydra/launcher: the installed launchers)."""
    from hydra.core.global_hydra import GlobalHydra

    try:
        start_hydra()
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))
    except Exception:  # noqa: BLE001 - advice only: an empty list is said as "none"
        return []
    finally:
        GlobalHydra.instance().clear()


def start_hydra(config_dir: Optional[Path] = None, search_dirs: Iterable[str] = ()) -> Any:
    """Initialise Hydra with the search path the application has: conf/ (or -cp), then each --config-dir."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.version import setbase

    from skillopt_ray.base.private_apis import hydra_create
    from skillopt_ray.config import register_schema

    setbase("1.3")  # as @hydra.main(version_base="1.3") does
    register_schema()
    GlobalHydra.instance().clear()
    return hydra_create(Path(config_dir or CONF_DIR), search_dirs)


def compose(
    overrides: list[str],
    config_dir: Optional[Path] = None,
    config_name: str = CONFIG_NAME,
    search_dirs: Iterable[str] = (),
    extra_keys: Iterable[str] = (),
) -> Config:
    """A run's config: composed by Hydra once and validated once (schema, ranges, rules between keys); paths as
    given (see absolute). Errors are one-line UsageErrors."""
    return typed(compose_node(overrides, config_dir, config_name, search_dirs, True, extra_keys))


def compose_node(
    overrides: list[str],
    config_dir: Optional[Path] = None,
    config_name: str = CONFIG_NAME,
    search_dirs: Iterable[str] = (),
    require_experiment: bool = True,
    extra_keys: Iterable[str] = (),
) -> Any:
    """Hydra composition with our strict schema (the OmegaConf node, not validated); errors become one-line
    UsageErrors.

    `config_name` is `config` (a run) or `sweep_config` (the sweep command: a run's config plus `sweep.*`)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    rest, prices = split_price_overrides(overrides)
    try:
        hydra = start_hydra(config_dir, search_dirs)
        cfg = hydra.compose_config(
            config_name=config_name, overrides=rest, run_mode=RunMode.RUN, from_shell=True, with_log_configuration=False
        )
    except (HydraException, OmegaConfBaseException) as e:
        raise UsageError(explain(e, config_dir, extra_keys)) from None
    finally:
        GlobalHydra.instance().clear()
    with open_dict(cfg):
        del cfg["hydra"]
    apply_prices(cfg, prices)
    if require_experiment:
        check_experiment(cfg, config_dir)
    return cfg


def check_experiment(cfg: Any, conf_dir: Optional[Path] = None) -> None:
    from omegaconf import OmegaConf

    if OmegaConf.is_missing(cfg, "experiment") or cfg.experiment is None:
        raise UsageError(f"no experiment chosen: add +experiment=<name> (one of {', '.join(experiments(conf_dir))})")


def typed(cfg: Any) -> Config:
    """The checked Config of a node Hydra composed (validated here, once)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    check_experiment(cfg)
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise UsageError(explain(e)) from None
    return typed_plain(data)  # type: ignore[arg-type]  # a config node resolves to a dict


def typed_plain(data: Mapping[str, object]) -> Config:
    """The checked Config of plain config data (a resolved composition, or one the compose cache kept): strict (a
    key added with + that the schema lacks fails here, not in the driver), validated once. OmegaConf is imported
    only when the data does not fit the schema field by field (config.plain.from_container)."""
    from skillopt_ray.config import ConfigError, from_container, validate

    try:
        obj = from_container(data)
        validate(obj)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    except Exception as e:
        if type(e).__module__.startswith("omegaconf"):  # the schema's own error, from OmegaConf's merge
            raise UsageError(explain(e)) from None
        raise
    return obj


def plain(config: Config) -> PlainConfig:
    """The config as plain data (what the run directory keeps, the identity hashes and benchmarks read)."""
    import dataclasses

    return dataclasses.asdict(config)  # type: ignore[return-value]  # Config's fields are PlainConfig's keys


def absolute(config: Config) -> Config:
    """A copy with absolute paths (see resolve_paths); rebuilt field by field, not validated again."""
    from skillopt_ray.config import from_container

    return from_container(resolve_paths(plain(config)))


def resolve_paths(data: PlainConfig) -> PlainConfig:
    """A copy with absolute paths (actors and Tune trials run elsewhere or change their working directory)."""
    data = copy.deepcopy(data)
    data["output_dir"] = str(Path(data["output_dir"]).expanduser().resolve())
    env = cast("dict[str, Any]", data["env"])  # written key by key
    for sect, key in ((env, "data_dir"), (env, "manifest_dir"), (data["eval"], "skill_path")):
        if sect.get(key):
            sect[key] = str(Path(os.path.expandvars(sect[key])).expanduser().resolve())
    opts = data["env"].get("options")
    if isinstance(opts, dict) and isinstance(opts.get("check"), str) and opts["check"]:  # a user's check script
        opts["check"] = str(Path(os.path.expandvars(str(opts["check"]))).expanduser().resolve())
    skill_init = data.get("skill_init")
    if skill_init:
        data["skill_init"] = str(Path(skill_init).expanduser().resolve())
    return data


def load(overrides: list[str], **kw: Any) -> PlainConfig:
    """compose + absolute, as plain data: the checked, absolute config a run is launched with."""
    return plain(absolute(compose(overrides, **kw)))
