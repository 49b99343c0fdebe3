"""The one-process engine: a run's driver, gateway and env workers as objects in the command's own process.

The same classes as on Ray (Driver, GatewayHost, EnvWorker), started by the LocalExecutor: the gateway and each
env worker on a thread and event loop of their own, the driver on the command's event loop beside the loop that
shows its progress. Nothing here imports Ray. Model-written code never runs in this process: the benchmarks run it
in their sandboxes and agent CLIs in their jail, as they do on Ray.

Ctrl-C cancels the run where it stands (asyncio turns it into a cancellation of the driver's task): every stage it
finished is checkpointed and its calls journaled, so the same command resumes it, here or on Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from pathlib import Path
from typing import Any

from skillopt_ray.base.startup_trace import mark
from skillopt_ray.config import Config
from skillopt_ray.config.skill_files import SkillTexts
from skillopt_ray.engine.driver import Driver
from skillopt_ray.engine.executor import LocalExecutor
from skillopt_ray.llm.gateway import GatewayHost
from skillopt_ray.runs.records import Outcome
from skillopt_ray.runs.rundir import RunDir

FOLLOW_EVERY_S = 1.0  # how often the command's display takes the driver's progress (as `follow` does on Ray)


def run_local(cfg: Config, run_dir: Path, progress: Any, clock: Any, skills: SkillTexts) -> Outcome:
    """Run the checked config in this process and return its outcome (what the driver actor returns on Ray)."""
    return asyncio.run(_run(cfg, run_dir, progress, clock, skills))


def start_gateway(executor: LocalExecutor, cfg: Config, run_dir: Path) -> Any:
    """The run's gateway, on a thread of its own, writing the ledger and cache into the run directory."""
    rd = RunDir(str(run_dir))
    cache = str(rd.cache_path) if cfg.llm.cache_mode != "off" else None
    return executor.start(GatewayHost, {}, cfg.llm, cache, str(rd.ledger_path), [])


async def _run(cfg: Config, run_dir: Path, progress: Any, clock: Any, skills: SkillTexts) -> Outcome:
    executor = LocalExecutor()
    gateway = start_gateway(executor, cfg, run_dir)
    driver = Driver(cfg, str(run_dir), None, gateway, [], skills, executor)
    mark("driver-submitted")
    run = asyncio.ensure_future(driver.run())
    frozen = False
    try:
        while True:
            done, _ = await asyncio.wait({run}, timeout=FOLLOW_EVERY_S)
            if done:
                outcome = run.result()
                mark("driver-returned")
                return outcome
            if not frozen and executor.first_call.is_set():
                # the start-up's imports are done once the first model call went out: Python's collector would walk
                # their objects again at every full collection of the run (a tenth of its CPU); they live to the end
                gc.freeze()
                frozen = True
            clock.tick()
            with contextlib.suppress(Exception):  # progress is best effort
                progress.update(await driver.progress())
    finally:
        if not run.done():  # Ctrl-C: the driver's own close runs (ledger saved, gateway closed)
            run.cancel()
            with contextlib.suppress(BaseException):
                await run
        executor.stop(gateway)
