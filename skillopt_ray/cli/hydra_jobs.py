"""Hydra's application for `-m`, and for a single run with Hydra settings of its own, done here with one
composition per job.

Hydra's own `@hydra.main` composes a multirun twice (to find its mode, then to run it) and each job twice more (its
sweeper checks that the job composes, then its launcher composes it to run), none of them validated; a single run
with a Hydra flag is composed twice. Here, for Hydra's basic sweeper and launcher (the ones it ships and the config
uses), the multirun's own config is composed once (its folder, multirun.yaml, its callbacks) and each job once: that
composition is validated and checked (cli.preflight) before any job starts, and it is the one Hydra's `run_job`
runs the task function with, as its launcher would (HydraConfig, the job's folder, logging, callbacks). Folders,
multirun.yaml and log lines are Hydra's own. Another sweeper or launcher (hydra/sweeper=..., hydra/launcher=...), a
sweep the config itself sets (hydra.sweeper.params) or `--experimental-rerun` is left to Hydra's application.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.cli.compose import PriceOverride, apply_prices, explain, start_hydra, typed
from skillopt_ray.cli.errors import UsageError
from skillopt_ray.config.schema import Config

# the basic launcher's own logger: its lines ("Launching 2 jobs locally") read as Hydra prints them
_LOG = logging.getLogger("hydra._internal.core_plugins.basic_launcher")


def job_key(overrides: Iterable[str]) -> tuple[str, ...]:
    """A job by its own overrides (Hydra's settings left out), as main() and Hydra's launcher both spell them."""
    return tuple(sorted(o for o in overrides if not o.lstrip("+~").startswith("hydra")))


@dataclass
class HydraJobs:
    """A command composed here: Hydra's instance, the command's own config (a multirun's, or the single run's, which
    is its one job) and each job's composition, by job key."""

    hydra: Any
    config_name: str
    cfg: Any
    multirun: bool
    nodes: dict[tuple[str, ...], Any] = field(default_factory=dict)
    order: list[list[str]] = field(default_factory=list)

    def jobs(self, overrides: list[str]) -> list[list[str]]:
        """The jobs, as Hydra's basic sweeper splits them (lists, range(), glob(), choice()); one for a single run."""
        mine = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
        if not self.multirun:
            return [mine]
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        from skillopt_ray.base.private_apis import hydra_split_jobs

        try:  # glob() lists config groups through this instance's loader
            parser = OverridesParser.create(config_loader=self.hydra.config_loader)
            return hydra_split_jobs(parser.parse_overrides(mine))
        except HydraException as e:
            raise UsageError(explain(e)) from None

    def compose(self, job: list[str], prices: list[PriceOverride]) -> Config:
        """A job's config: composed once (Hydra's settings kept for its launch), validated once."""
        from hydra.errors import HydraException
        from omegaconf import open_dict
        from omegaconf.errors import OmegaConfBaseException

        from skillopt_ray.base.private_apis import hydra_compose_job

        node = self.cfg
        if self.multirun:
            try:
                node = hydra_compose_job(self.hydra, self.cfg, job)
            except (HydraException, OmegaConfBaseException) as e:
                raise UsageError(explain(e)) from None
        self.nodes[job_key(job)] = node
        self.order.append(job)
        task = copy.deepcopy(node)
        with open_dict(task):
            del task["hydra"]
        apply_prices(task, prices)
        return typed(task)

    def run(self, task: Callable[[Any], int]) -> None:
        """Run every composed job through Hydra's `run_job`, as Hydra.run or its basic sweeper and launcher would."""
        from hydra.core.utils import configure_log, filter_overrides, run_job, setup_globals
        from omegaconf import OmegaConf, open_dict

        from skillopt_ray.base.private_apis import hydra_context

        cfg, name = self.cfg, self.config_name
        context = hydra_context(self.hydra, cfg)
        if not self.multirun:
            context.callbacks.on_run_start(config=cfg, config_name=name)
            ret = run_job(task, cfg, "hydra.run.dir", None, context, configure_logging=True)
            context.callbacks.on_run_end(config=cfg, config_name=name, job_return=ret)
            _ = ret.return_value  # the task's exception, raised
            return
        context.callbacks.on_multirun_start(config=cfg, config_name=name)
        sweep_dir = Path(str(cfg.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, sweep_dir / "multirun.yaml")
        setup_globals()
        configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
        _LOG.info(f"Launching {len(self.order)} jobs locally")
        returns = []
        for idx, job in enumerate(self.order):
            _LOG.info(f"\t#{idx} : {' '.join(filter_overrides(job))}")
            node = self.nodes[job_key(job)]
            with open_dict(node):
                node.hydra.job.id = idx
                node.hydra.job.num = idx
            returns.append(run_job(task, node, "hydra.sweep.dir", "hydra.sweep.subdir", context))
            configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
        for ret in returns:
            _ = ret.return_value
        context.callbacks.on_multirun_end(config=cfg, config_name=name)

    def close(self) -> None:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()


def start(
    args: Any, overrides: list[str], config_dir: Path, config_name: str, search_dirs: list[str]
) -> Optional[HydraJobs]:
    """The command's own config, composed once, for its jobs to be composed and launched here; None when Hydra's
    application must run it (see the module's doc)."""
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    if getattr(args, "experimental_rerun", None) or any(o.lstrip("+~").startswith("hydra/") for o in overrides):
        return None
    mode = RunMode.MULTIRUN if args.multirun else RunMode.RUN
    hydra = start_hydra(config_dir, search_dirs)
    jobs = HydraJobs(hydra, config_name, None, bool(args.multirun))
    try:
        jobs.cfg = hydra.compose_config(
            config_name=config_name,
            overrides=[*overrides, *(["hydra.mode=MULTIRUN"] if args.multirun else [])],  # as Hydra's app adds it
            run_mode=mode,
            from_shell=True,
            with_log_configuration=True,
        )
    except (HydraException, OmegaConfBaseException) as e:
        jobs.close()
        raise UsageError(explain(e, config_dir)) from None
    hc = jobs.cfg.hydra
    basic = hc.runtime.choices.get("hydra/sweeper") == "basic" and hc.runtime.choices.get("hydra/launcher") == "basic"
    if not basic or (args.multirun and hc.sweeper.get("params")) or (not args.multirun and hc.mode == RunMode.MULTIRUN):
        jobs.close()
        return None
    if args.multirun:
        str(hc.sweep.dir)  # resolved now, as Hydra's sweeper does before its jobs: they copy its ${now:...}
    elif hc.mode is None:  # as Hydra's app sets it (with the override it adds) for a run the config leaves unset
        from omegaconf import open_dict, read_write

        with read_write(hc), open_dict(hc):
            hc.mode = RunMode.RUN
            hc.overrides.hydra.append("hydra.mode=RUN")
    return jobs
