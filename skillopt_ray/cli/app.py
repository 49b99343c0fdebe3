"""The command line: a Hydra application over `conf/`.

    python -m skillopt_ray +experiment=alfworld [overrides...]
    python -m skillopt_ray +experiment=alfworld -m seed=1,2,3 optimizer.learning_rate=range(2,7,2)
    python -m skillopt_ray +experiment=alfworld --cfg job        # the resolved config (secrets masked)
    python -m skillopt_ray --info | --help | -sc install=bash | --config-dir DIR | -cn NAME

Everything Hydra offers works as Hydra documents it (`@hydra.main`, its sweepers and launchers for `-m`, the
full override grammar). What this module adds around it:
- every job's config is composed and validated before the first one starts, so bad input is one
  line and exit code 2, and an unknown key is answered with the schema's nearest keys;
- each job is composed once: a plain run here, `-m` and Hydra's own settings through cli.hydra_jobs (Hydra's basic
  sweeper and launcher, done with the one composition; another sweeper or launcher is Hydra's application's);
- `llm.prices.<model>.<field>=<value>` for any model name (see cli.compose);
- where a run lives: `hydra.run.dir` (or `hydra.sweep.dir` + `hydra.sweep.subdir` under `-m`) given
  explicitly is the run directory itself; otherwise the run directory is derived from the config
  under `output_dir/runs/` (rerunning the same command resumes), and under `-m` each job's Hydra
  folder gets a `run` link to it;
- `--cfg job` prints the resolved, checked config with secrets masked; `--debug` (or HYDRA_FULL_ERROR=1)
  shows tracebacks.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from skillopt_ray.base.folder import in_folder
from skillopt_ray.base.startup_trace import mark
from skillopt_ray.cli.compose import (
    CONF_DIR,
    CONFIG_NAME,
    PriceOverride,
    absolute,
    apply_prices,
    compose_node,
    explain,
    plain,
    refuse_repeated_keys,
    split_price_overrides,
    typed,
    typed_plain,
)
from skillopt_ray.cli.errors import UsageError
from skillopt_ray.cli.hydra_jobs import HydraJobs, job_key
from skillopt_ray.cli.preflight import Checked
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.schema import Config


@dataclass
class _Session:
    """What main() hands to the task function (Hydra calls it with the composed config only)."""

    prices: list[PriceOverride] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    checked: dict[tuple[str, ...], Checked] = field(default_factory=dict)  # each job's, by its overrides
    stopped: bool = False  # a job hit bad input (a missing key, Ray unreachable): the jobs after it would too


_SESSION = _Session()


def hydra_run_dir(hc: Any, data: PlainConfig) -> Optional[Path]:
    """The run directory Hydra's settings ask for, or None to derive one from the config."""
    from hydra.types import RunMode

    given = {o.split("=", 1)[0].lstrip("+~") for o in hc.overrides.hydra}
    if hc.mode == RunMode.MULTIRUN:
        if given & {"hydra.sweep.dir", "hydra.sweep.subdir"}:
            return Path(hc.runtime.output_dir)
        return None
    default = Path(data["output_dir"])
    explicit = Path(hc.runtime.cwd, hc.run.dir).resolve()
    return explicit if ("hydra.run.dir" in given or explicit != default) else None


def task(cfg: Any) -> int:
    """One job: the config Hydra composed -> a checked, absolute config -> a run."""
    if _SESSION.stopped:
        return EXIT_CONFIG
    try:
        code = _job(cfg)
    except UsageError as e:  # worded here: raised, Hydra would log the job's overrides beside it
        print(f"error: {e}", file=sys.stderr)
        _SESSION.stopped, code = True, EXIT_CONFIG
    _SESSION.codes.append(code)
    return code


def _job(cfg: Any) -> int:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from skillopt_ray.cli.launch import run_dir_for, run_one
    from skillopt_ray.cli.preflight import preflight

    hc = HydraConfig.get()
    checked = _SESSION.checked.get(job_key([str(o) for o in hc.overrides.task]))
    if checked is None:  # a job main() did not plan (another sweeper's): checked here, once
        apply_prices(cfg, _SESSION.prices)
        with in_folder(hc.runtime.cwd):  # hydra.job.chdir=true moved us into the job's folder; paths are the caller's
            checked = preflight(typed(cfg))
    data = checked.data
    run_dir = hydra_run_dir(hc, data)
    if run_dir is None and hc.mode == RunMode.MULTIRUN:
        run_dir = run_dir_for(data)
        link = Path(hc.runtime.output_dir) / "run"
        with contextlib.suppress(OSError):
            if link.is_symlink():
                link.unlink()
            link.symlink_to(run_dir, target_is_directory=True)
    return run_one(checked, run_dir, [str(o) for o in hc.overrides.task])


def _hydra_args(argv: list[str]) -> Any:
    from skillopt_ray.cli.args import command_parser

    try:  # flags may come anywhere (`... seed=1,2 -m`), as users write them
        return command_parser().parse_intermixed_args(argv)
    except SystemExit as e:  # argparse printed its usage line
        raise _Exit(int(e.code or 0)) from None


class _Exit(Exception):
    def __init__(self, code: int):
        self.code = code


def _conf_dir(args: Any) -> Path:
    return Path(args.config_path).resolve() if args.config_path else CONF_DIR


def _search_dirs(args: Any) -> list[str]:
    if not args.config_dir:
        return []
    if not Path(args.config_dir).is_dir():
        raise UsageError(f"--config-dir {args.config_dir}: no such directory")
    from skillopt_ray.cli.checks import check_config_dir

    check_config_dir(Path(args.config_dir))
    return [args.config_dir]


def jobs_of(args: Any, overrides: list[str]) -> list[list[str]]:
    """The jobs `-m` will launch, as Hydra's basic sweeper splits them (lists, range(), glob(), choice())."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    mine = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    if len(mine) != len([o for o in overrides if not o.startswith("hydra.")]):
        return []  # another sweeper (hydra/sweeper=...) makes its own jobs; each is checked when it starts
    from skillopt_ray.cli.compose import start_hydra

    try:
        start_hydra(_conf_dir(args), _search_dirs(args))  # glob() lists config groups through Hydra's loader
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        from skillopt_ray.base.private_apis import hydra_split_jobs

        return hydra_split_jobs(parser.parse_overrides(mine))
    except HydraException as e:
        raise UsageError(explain(e)) from None
    finally:
        GlobalHydra.instance().clear()


def check_jobs(
    args: Any, overrides: list[str], prices: list[PriceOverride], here: Optional[HydraJobs] = None
) -> list[Checked]:
    """Compose, validate and check every job before any starts (one line and exit 2 for the first bad one); each
    job once (cli.preflight). Returns each job's Checked, also kept for Hydra's task function. `here`: the command
    launched by cli.hydra_jobs, whose compositions of the jobs are the ones checked (and then run)."""
    from skillopt_ray.cli.preflight import preflight

    if here is not None:
        jobs = here.jobs(overrides)
    else:
        jobs = jobs_of(args, overrides) if args.multirun else [[o for o in overrides if not o.startswith("hydra.")]]
    swept = {o.split("=", 1)[0] for o in overrides if o not in (jobs[0] if jobs else [])}
    data_seen: set[str] = set()  # jobs reading the same data and splits: read once
    checked: list[Checked] = []
    for job in jobs:
        try:
            config = here.compose(job, prices) if here is not None else composed(args, job, prices)
            one = preflight(config, data_seen)
        except UsageError as e:
            if not args.multirun:
                raise
            which = " ".join(o for o in job if o.split("=", 1)[0] in swept)
            raise UsageError(f"{e} (in the job {which}; no job was started)") from None
        _SESSION.checked[job_key(job)] = one
        checked.append(one)
    return checked


def launch_here(args: Any, overrides: list[str]) -> Optional[int]:
    """A command Hydra's application would run (-m, a Hydra flag or setting), run here instead with one composition
    per job (cli.hydra_jobs); None when it is Hydra's to run (another sweeper or launcher)."""
    from skillopt_ray.cli.hydra_jobs import start

    here = start(args, overrides, _conf_dir(args), args.config_name or CONFIG_NAME, _search_dirs(args))
    if here is None:
        return None
    try:
        check_jobs(args, overrides, _SESSION.prices, here)
        here.run(task)
    finally:
        here.close()
    return max(_SESSION.codes, default=EXIT_OK)


def composed(args: Any, job: list[str], prices: list[PriceOverride]) -> Config:
    """A job's config, composed and validated (paths not yet resolved). A command composed before with the same
    overrides, config files and environment is read back from the compose cache (cli/compose_cache.py) and only
    validated; the kept cluster's holder also remembers its last one in memory (skillopt_ray/engine/warm.py)."""
    import copy

    import skillopt_ray.cli.compose_cache as compose_cache
    from skillopt_ray.engine.warm import serving

    served = serving()
    search = _search_dirs(args)  # checks every YAML file of --config-dir: once
    key = compose_cache.fingerprint(
        [_conf_dir(args), *map(Path, search)], [args.config_name or "", *job, *map(repr, prices)]
    )
    if served is not None and key in served.memo:
        return copy.deepcopy(served.memo[key])
    remembered = compose_cache.load(key)
    if isinstance(remembered, dict):
        try:
            config = typed_plain(remembered)
        except UsageError:  # an entry the schema no longer takes: composed afresh below
            config = None
    else:
        config = None
    if config is None:
        cfg = compose_node(
            job, config_dir=_conf_dir(args), config_name=args.config_name or CONFIG_NAME, search_dirs=search
        )
        apply_prices(cfg, prices)
        config = typed(cfg)
        compose_cache.save(key, plain(config))
    if served is not None:
        served.memo.clear()  # one entry: the command a researcher repeats
        served.memo[key] = copy.deepcopy(config)
    return config


def plain_single_run(args: Any, flags: list[str], overrides: list[str]) -> bool:
    """A command that is one run with no Hydra setting of its own beyond a plain `hydra.run.dir=PATH` (no flag, no
    other `hydra.*` override, no `-m`): the config preflight composed is the run's, so Hydra's application layer
    (which composes it twice more, to find the mode and to run) adds nothing but a second."""
    hydra_keys = [o for o in overrides if o.lstrip("+~").startswith("hydra")]
    return not (args.multirun or flags) and all(_literal_run_dir(o) for o in hydra_keys)


def _literal_run_dir(override: str) -> bool:
    """`hydra.run.dir=PATH` with a plain path (no interpolation, quoting or list): the run directory itself, as Hydra
    would make it."""
    import re

    key, _, value = override.partition("=")
    return key == "hydra.run.dir" and re.fullmatch(r"[\w./@:+-]+", value) is not None


def given_run_dir(overrides: list[str]) -> Optional[Path]:
    """The run directory a plain command names with `hydra.run.dir=PATH` (relative to where it runs), or None."""
    for o in overrides:
        if _literal_run_dir(o):
            return Path(os.getcwd(), o.partition("=")[2]).resolve()
    return None


def run_checked(checked: Checked, overrides: list[str]) -> int:
    """Run a config check_jobs composed and checked, as Hydra's task function would: in the run directory the
    command names (`hydra.run.dir=PATH`), or one derived from the config."""
    from skillopt_ray.cli.launch import run_one

    task = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]  # what Hydra records as the job's
    try:
        return run_one(checked, given_run_dir(overrides), task)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG


def show_job_config(args: Any, overrides: list[str], prices: list[PriceOverride]) -> None:
    """`--cfg job`: the resolved config; under -m, each job's, headed by the values it sweeps."""
    jobs = jobs_of(args, overrides) if args.multirun else [[o for o in overrides if not o.startswith("hydra.")]]
    swept = {o.split("=", 1)[0] for o in overrides if o not in (jobs[0] if jobs else [])}
    for n, job in enumerate(jobs):
        if args.multirun:
            which = " ".join(o for o in job if o.split("=", 1)[0] in swept)
            print(f"{'' if n == 0 else chr(10)}# job {n + 1} of {len(jobs)}: {which}")
        _show_one_config(args, job, prices)


def _show_one_config(args: Any, overrides: list[str], prices: list[PriceOverride]) -> None:
    import yaml

    from skillopt_ray.config import redact

    cfg = compose_node(
        overrides,
        config_dir=_conf_dir(args),
        config_name=args.config_name or CONFIG_NAME,
        search_dirs=_search_dirs(args),
    )
    apply_prices(cfg, prices)
    data: Any = redact(plain(absolute(typed(cfg))))
    if args.package:
        for part in args.package.split("."):
            if not isinstance(data, dict) or part not in data:
                raise UsageError(f"--package {args.package}: no such section in the config")
            data = data[part]
    print(yaml.safe_dump(data, sort_keys=False), end="")


def _hydra_main() -> Any:
    import hydra

    return hydra.main(config_path=str(CONF_DIR), config_name=CONFIG_NAME, version_base="1.3")(task)


def _run_hydra(argv: list[str]) -> None:
    """Hand the command line to Hydra (errors raised, not printed: main() words them)."""
    from skillopt_ray.config import register_schema

    register_schema()
    saved_argv, saved_err = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = [saved_argv[0] if saved_argv and saved_argv[0] else "skillopt_ray", *argv]
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _hydra_main()()
    finally:
        sys.argv = saved_argv
        if saved_err is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_err


def _run(args: Any, flags: list[str], overrides: list[str]) -> Optional[int]:
    """Run the command's jobs here (a plain run, or -m and Hydra's settings through cli.hydra_jobs); None when
    Hydra's application runs them (another sweeper or launcher: what can be checked before it is)."""
    if plain_single_run(args, flags, overrides):
        checked = check_jobs(args, overrides, _SESSION.prices)[0]
        mark("config-checked")
        return run_checked(checked, overrides)
    code = launch_here(args, overrides)
    if code is None:
        check_jobs(args, overrides, _SESSION.prices)  # another sweeper's jobs are checked as each starts
    return code


def from_hydra(e: BaseException) -> bool:
    """A Hydra or OmegaConf error (bad config input: exit 2). Neither is imported to ask: a command whose config
    came from the compose cache never loads them, and then none of their errors can have been raised."""
    hydra_errors, omegaconf_errors = sys.modules.get("hydra.errors"), sys.modules.get("omegaconf.errors")
    kinds = (
        *([hydra_errors.HydraException] if hydra_errors else []),
        *([omegaconf_errors.OmegaConfBaseException] if omegaconf_errors else []),
    )
    return bool(kinds) and isinstance(e, kinds)


def main(argv: Optional[list[str]] = None) -> int:
    mark("cli-started")
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    argv = [a for a in argv if a != "--debug"]
    _SESSION.codes.clear()
    _SESSION.checked.clear()
    _SESSION.stopped = False
    try:
        args = _hydra_args(argv)
        refuse_repeated_keys(args.overrides)
        overrides, _SESSION.prices = split_price_overrides(args.overrides)
        flags = list(argv)
        for o in args.overrides:
            flags.remove(o)
        passed = flags + overrides  # Hydra's parser wants its flags first; price overrides are applied by task()
        if args.config_path:  # relative to where the command runs (Hydra would read it relative to this module)
            passed = [str(_conf_dir(args)) if a == args.config_path else a for a in passed]
        other = args.help or args.hydra_help or args.info or args.shell_completion or args.cfg not in (None, "job")
        if args.cfg == "job" and not args.help:
            show_job_config(args, overrides, _SESSION.prices)
            return EXIT_OK
        import skillopt_ray.cli.completion as completion  # bash: `python -m skillopt_ray` too, not only the installed command

        if args.shell_completion and completion.handle(args.overrides, lambda: _run_hydra(passed)):
            return EXIT_OK
        code = None if other else _run(args, flags, overrides)
        if code is not None:
            return code
        _run_hydra(passed)
        return max(_SESSION.codes, default=EXIT_OK)
    except _Exit as e:
        return e.code
    except SystemExit as e:  # --help, --info and friends end this way
        return int(e.code or 0) if isinstance(e.code, int) or e.code is None else EXIT_CONFIG
    except UsageError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return EXIT_STOPPED
    except Exception as e:  # noqa: BLE001 - one line; --debug shows the traceback
        if debug:
            raise
        if from_hydra(e):
            print(f"error: {explain(e)}", file=sys.stderr)
            return EXIT_CONFIG
        print(
            f"error: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR
