"""Launch one run: its directory, the embedded model server, its engine (Ray and the driver actor, or the
one-process engine: cli/engine_choice.py); wait and return the outcome.

`execute(checked)` is the one code path of a run, for the CLI, `-m`, every sweep trial, a night and transfer; it takes
only a `Checked` (cli.preflight), so it checks nothing again. It never writes into the config it is given (the
embedded server's URL goes into its own copy).
Start-up overlaps what can overlap: the embedded llama.cpp server starts beside Ray, not after it.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import shutil
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.base.collector import imports_without_collector
from skillopt_ray.base.exit_codes import EXIT_ERROR
from skillopt_ray.base.startup_trace import mark
from skillopt_ray.cli.checks import needs_embedded_server, skill_warnings
from skillopt_ray.cli.engine_choice import EngineChoice, choose
from skillopt_ray.cli.errors import UsageError
from skillopt_ray.cli.identity import check_or_record, identity_record, runs_before_a_change
from skillopt_ray.cli.preflight import Checked
from skillopt_ray.cli.provenance import collect
from skillopt_ray.cli.ray_session import start_ray
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.schema import Config
from skillopt_ray.runs.records import Identity, Origin, Outcome
from skillopt_ray.runs.rundir import RunDir  # noqa: E402


def run_dir_for(data: PlainConfig, record: Optional[Identity] = None) -> Path:
    """`<output_dir>/runs/<experiment>-<mode>-seed<seed>-<identity>`, or `<output_dir>/runs/<run_name>`."""
    name = data.get("run_name")
    if not name:
        prefix = "eval" if data["mode"] == "eval" else "train"
        ident = (record or identity_record(data))["identity"]
        name = f"{data['experiment']}-{prefix}-seed{data['seed']}-{ident}"
    return Path(data["output_dir"]) / "runs" / name


def job_submission_id() -> Optional[str]:
    """The `ray job submit` submission id when we run as a job's entrypoint, else None."""
    import json
    import os

    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return json.loads(raw).get("metadata", {}).get("job_submission_id")
    except ValueError:
        return None


def record_job(run_dir: Path) -> None:
    """Map the job to its run: every submission that worked on this run directory is listed in jobs.json."""
    job = job_submission_id()
    if not job:
        return
    RunDir(run_dir).add_job({"submission_id": job, "started": time.strftime("%Y-%m-%dT%H:%M:%S")})
    print(f"ray job {job} -> run directory {run_dir}", file=sys.stderr)


def prepare_run_dir(run_dir: Path, data: PlainConfig, record: Identity) -> None:
    """resume=false moves an old run aside; a resumed run must have been made from the same inputs."""
    if run_dir.exists() and not data["resume"]:
        backup = run_dir.with_name(run_dir.name + f".old-{int(time.time())}")
        shutil.move(str(run_dir), str(backup))
        print(f"resume=false: previous run moved to {backup}", file=sys.stderr)
    elif RunDir(run_dir).has_state():
        print(f"resuming run in {run_dir}", file=sys.stderr)
    elif run_dir.name.endswith("-" + record["identity"]):  # a new derived run: one made before an edit may be there
        for line in runs_before_a_change(run_dir, record):
            print(line, file=sys.stderr)
    run_dir.mkdir(parents=True, exist_ok=True)
    check_or_record(run_dir, record, resuming=bool(data["resume"]))


class EmbeddedStart:
    """The embedded model server, started in a thread so that Ray starts at the same time."""

    def __init__(self, data: PlainConfig, run_dir: Path):
        from skillopt_ray.llm.embedded import EmbeddedServer

        e = data["llm"]["embedded"]
        self.url: Optional[str] = e.get("server_url")  # a server that is already running (a sweep's)
        self.server: Optional[EmbeddedServer] = None
        self._pool: Optional[ThreadPoolExecutor] = None
        self._future: Optional[Future] = None
        if not self.url:
            self.server = EmbeddedServer(
                e["model_path"],
                e["ctx_size"],
                e["threads"],
                e["parallel"],
                e["startup_timeout_s"],
                RunDir(run_dir).embedded_log_path,
            )
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="embedded-start")
            self._future = self._pool.submit(self.server.start)

    def wait(self) -> str:
        from skillopt_ray.llm.embedded import EmbeddedUnavailable

        if self._future is not None:
            try:
                self.url = self._future.result()
            except EmbeddedUnavailable as err:
                raise UsageError(str(err)) from None
        assert self.url
        return self.url

    def stop(self) -> None:
        if self._future is not None:
            try:
                self._future.result()  # let a start in progress finish, so that stop() finds the process
            except Exception:  # noqa: BLE001 - its error was reported by wait(), or the run failed before
                pass
            self._pool.shutdown()  # type: ignore[union-attr]
        if self.server is not None:
            self.server.stop()


def with_endpoint(config: Config, url: str) -> Config:
    """A copy of the config whose embedded roles call `url`."""
    out = copy.deepcopy(config)
    roles = [out.llm.target, out.llm.optimizer] + ([out.llm.judge] if out.llm.judge.model else [])
    for role in roles:  # an unset judge is the optimizer's endpoint
        if role.provider == "embedded":
            role.base_url = url
    return out


def execute(checked: Checked, run_dir: Optional[Path] = None, origin: Optional[Origin] = None) -> Outcome:
    """One training (or eval) run through the driver actor; the outcome dict it returns says how it ended.

    `checked`: the run's config after every check (cli.preflight): nothing is checked again here.
    `run_dir`: where the run lives (default: derived from the config and its inputs, see run_dir_for).
    `origin`: the command that asks for the run (`argv`, Hydra `overrides`; default this process's argv), kept
    in the run directory's provenance."""
    from skillopt_ray.runs.progress import RunClock, make_display

    if not isinstance(checked, Checked):  # a dict or a bare Config has skipped the checks
        raise TypeError("execute() runs a Checked config: pass it through skillopt_ray.cli.preflight first")
    data = checked.data
    engine = choose(data)
    run_dir = _open_run(checked, run_dir, origin)
    mark("run-opened")
    print(engine.line(), file=sys.stderr)  # after the checks, whose errors are one line
    clock = RunClock(run_dir).begin()
    progress = make_display(data["debug"]["progress"], started_at=clock.started)
    outcome = Outcome(status="interrupted")
    embedded: Optional[EmbeddedStart] = None
    try:
        if needs_embedded_server(data):
            from skillopt_ray.llm.embedded import NOTICE

            print(f"note: {NOTICE}", file=sys.stderr)
            embedded = EmbeddedStart(data, run_dir)
        outcome = _drive(checked, run_dir, embedded, progress, clock, engine)
    finally:
        progress.close()
        clock.end(outcome.get("status", "interrupted"))
        if embedded is not None:
            embedded.stop()
    outcome["notes"] = progress.unshown(outcome.get("notes", []))  # the rest were printed when they appeared
    outcome["timing"] = clock.timing()
    return outcome


def _open_run(checked: Checked, run_dir: Optional[Path], origin: Optional[Origin]) -> Path:
    """Prepare the run directory of a checked run (identity, provenance, the job's record); returns it."""
    data = checked.data
    for line in skill_warnings(data, checked.skills):
        print(line, file=sys.stderr)
    record = identity_record(data, checked.skills)
    run_dir = Path(run_dir) if run_dir else run_dir_for(data, record)
    prepare_run_dir(run_dir, data, record)
    origin = origin or {}
    RunDir(run_dir).write_provenance(
        collect(origin.get("overrides", []), data, origin.get("argv"), origin.get("entry"))
    )
    record_job(run_dir)
    return run_dir


def _drive(
    checked: Checked,
    run_dir: Path,
    embedded: Optional[EmbeddedStart],
    progress: Any,
    clock: Any,
    engine: EngineChoice,
) -> Outcome:
    """Start Ray (and wait for the embedded server, if any), run the driver actor and follow it to its outcome; or
    run it all in this process (the one-process engine)."""
    if engine.kind == "local":
        return _drive_local(checked, run_dir, embedded, progress, clock)
    import ray

    data, run_cfg = checked.data, checked.config
    progress.update(
        {"phase": "starting", "stage": "starting Ray" + (" and the embedded model server" if embedded else "")}
    )
    # the driver's imports (the LLM client, the engine, the stages: about a second) load while Ray starts
    loader = threading.Thread(
        target=importlib.import_module, args=("skillopt_ray.engine.driver",), name="import-driver", daemon=True
    )
    loader.start()
    mark("ray-starting")
    start_ray(data)
    mark("ray-up")
    if embedded is not None:
        run_cfg = with_endpoint(run_cfg, embedded.wait())
    loader.join()
    from skillopt_ray.engine import warm
    from skillopt_ray.engine.driver import DriverActor, driver_options, start_gateway
    from skillopt_ray.engine.envpool import prestart_actor

    # the driver, the gateway and the env actors exit within ~0.1 s of the command's death (no paid calls after a
    # kill); on the kept cluster's holder the command is the process that asked for the run
    me = warm.run_owner()
    spawn = warm.spawner()  # new actors, or the kept cluster's idle copies (skillopt_ray/engine/warm.py)
    driver_opts = driver_options(run_cfg.ray)
    # with the driver on this node, its gateway (on the driver's node) and its first env actor are started here
    # too: the three processes come up at once instead of one after the other
    local = "scheduling_strategy" in driver_opts
    owners = [me] if me else []
    gateway = start_gateway(run_cfg, str(run_dir), owners, spawn) if local else None
    early = [a for a in [prestart_actor(data, gateway, owners, spawn) if local else None] if a is not None]
    started = {"gateway": gateway, "env_actors": early} if local else {}
    driver = spawn(DriverActor, driver_opts, run_cfg, str(run_dir), me, skills=checked.skills, **started)
    mark("actors-requested")
    warm.wait_ready()
    ref = driver.run.remote()
    mark("driver-submitted")
    print(f"run directory: {run_dir}", file=sys.stderr)
    try:
        follow(driver, ref, progress, clock)
        outcome: Outcome = ray.get(ref)
        mark("driver-returned")
    except ray.exceptions.RayActorError as e:  # killed (OOM, a lost node, a signal): its state is on disk
        return driver_lost(e, run_dir)
    finally:
        end_actors(driver, ref, [gateway, *early])
    return outcome


def _drive_local(
    checked: Checked, run_dir: Path, embedded: Optional[EmbeddedStart], progress: Any, clock: Any
) -> Outcome:
    """The run in this process: the same driver, gateway and env workers, on threads instead of Ray actors."""
    with imports_without_collector():
        from skillopt_ray.engine.local import run_local

    mark("engine-imported")
    progress.update({"phase": "starting", "stage": "starting" + (" the embedded model server" if embedded else "")})
    run_cfg = checked.config
    if embedded is not None:
        run_cfg = with_endpoint(run_cfg, embedded.wait())
    print(f"run directory: {run_dir}", file=sys.stderr)
    return run_local(run_cfg, run_dir, progress, clock, checked.skills)


def end_actors(driver: Any, ref: Any, others: list[Any]) -> None:
    """End the driver, then the actors the command started for it (the driver ends them; one that died could not,
    and a sweep goes on). The driver goes first and its end is awaited (briefly): a driver still running when its
    gateway is killed (Ctrl-C, a dashboard's Stop) would see its calls fail and end its MLflow run FAILED, where a
    stopped run is left for its resume (or marked KILLED by the page that stopped it)."""
    import ray

    with contextlib.suppress(Exception):
        ray.kill(driver, no_restart=True)
        ray.wait([ref], timeout=5.0)
    for handle in others:
        with contextlib.suppress(Exception):
            ray.kill(handle, no_restart=True) if handle is not None else None


def driver_lost(err: BaseException, run_dir: Path) -> Outcome:
    """The outcome of a run whose driver actor died: one line saying so and how to go on (every stage it finished
    is checkpointed, so the same command resumes from there), never Ray's multi-line error."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip()
    why = text.splitlines()[0][:200] if text else type(err).__name__
    return {
        "status": "error",
        "exit": EXIT_ERROR,
        "message": f"the driver actor died ({why}); the run's state is saved in {run_dir}: rerun the same command to "
        "resume",
        "notes": [],
        "run_dir": str(run_dir),
    }


def follow(driver: Any, ref: Any, progress: Any, clock: Any) -> None:
    """Poll the driver's progress into the display until the run (`ref`) ends."""
    import ray

    while True:
        ready, _ = ray.wait([ref], timeout=1.0)
        if ready:
            return
        clock.tick()
        try:
            progress.update(ray.get(driver.progress.remote(), timeout=5))
        except Exception:  # noqa: BLE001 - progress is best effort
            pass


def run_one(checked: Checked, run_dir: Optional[Path] = None, overrides: Optional[list[str]] = None) -> int:
    """Run a checked config end to end and print how it ended; returns the exit code."""
    from skillopt_ray.cli.report import report

    outcome = execute(checked, run_dir, {"overrides": list(overrides or [])})
    mark("run-ended")
    return report(outcome)
