"""The driver: one object owns a run — its state, checkpoints, gateway and environment pool.

It runs as the Ray actor `DriverActor`, or in the command's own process (the one-process engine,
skillopt_ray/engine/local.py); the executor it is given starts and calls the run's other parts.
This module imports no Ray: the Ray names are made on first use.

It returns an outcome record rather than raising, so the CLI can print one line
that names the problem (and exit non-zero) without a traceback.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, cast

import skillopt_envs
from skillopt_envs.base import DataError, EpisodeContext

from skillopt_ray.base.disk import FULL_DISK_FIX, disk_full, error_text
from skillopt_ray.base.exit_codes import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, EXIT_STOPPED
from skillopt_ray.base.lifeline import Owner
from skillopt_ray.base.startup_trace import mark
from skillopt_ray.base.stats import mean_interval
from skillopt_ray.config import Config, ConfigError, RayConfig, redact
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.skill_files import SkillTexts, read_skill_file
from skillopt_ray.engine.envpool import EnvPool, PoolSettings, pool_shape
from skillopt_ray.engine.executor import FIRST_CALL_WAIT_S, Executor, ray_executor
from skillopt_ray.engine.trainer import SimulatedInterrupt, Splits, Trainer, limit_tasks
from skillopt_ray.engine.warm import ActorOptions, Spawner, fresh
from skillopt_ray.llm.gateway import GatewayHost, LLMHandle
from skillopt_ray.llm.types import BudgetExceeded, LLMError
from skillopt_ray.runs.progress import Eta
from skillopt_ray.runs.records import Outcome, Progress, Summary
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.state import StateVersionError
from skillopt_ray.runs.tracking import Tracker, TrackingError, default_tracking_uri
from skillopt_ray.skill.document import normalize_markers
from skillopt_ray.stages.rollout import InfraFailure, check_data, rollout_repeats, summarize


def load_splits(bench: Any, cfg: Any) -> Splits:
    e = cfg.env
    return Splits(
        train=limit_tasks(bench.load_split(e.train_split), e.limit_train),
        selection=limit_tasks(bench.load_split(e.selection_split), e.limit_selection),
        test=limit_tasks(bench.load_split(e.test_split), e.limit_test),
    )


class Run:
    """Everything one run needs, built inside the driver process from the config the command checked (it is not
    validated again here) and the skill documents' text the command read (`skills`, by config key)."""

    def __init__(
        self,
        cfg: Config,
        run_dir: str,
        owners: Optional[list[Optional[Owner]]] = None,
        gateway: Any = None,
        env_actors: Optional[list[Any]] = None,
        skills: Optional[SkillTexts] = None,
        executor: Optional[Executor] = None,
    ):
        import dataclasses

        self.executor = executor or ray_executor()  # where the gateway and the env workers run
        self.cfg = cfg
        self.cfg_dict = cast(PlainConfig, dataclasses.asdict(cfg))  # for the benchmark, config.yaml and MLflow
        self.skills = dict(skills or {})
        self.prestarted = list(env_actors or [])  # env actors the command started beside this actor
        self.owners = [o for o in (owners or []) if o]  # processes whose death ends every actor of this run
        self.rd = RunDir(run_dir).ensure()
        self.progress = Progress(phase="starting")
        self.pool: Optional[EnvPool] = None
        self.gateway: Any = gateway  # started by the command beside this actor (start_gateway), or by _setup
        self.trainer: Optional[Trainer] = None
        self.tracker: Optional[TrackerWhenReady] = None
        self.notes: list[str] = []

    def _setup(self) -> tuple[Any, LLMHandle]:
        cfg = self.cfg
        self.set_progress(stage="loading the benchmark")
        bench = skillopt_envs.make(cfg.env.name, self.cfg_dict["env"])
        mark("benchmark-loaded")
        note = bench.data_note()
        if note:
            self.notes.append(note)
        if self.gateway is None:
            self.gateway = start_gateway(self.cfg, str(self.rd.root), self.owners)  # on Ray: see cli/launch._drive
        self.rd.write_config(redact(self.cfg_dict))
        llm = LLMHandle(self.gateway)
        self.set_progress(stage="starting environment actors")
        chat = not bench.holds_env_state and cfg.llm.target.harness == "chat"  # an agent CLI per episode is heavy
        actors, per_actor = pool_shape(
            cfg.ray.env_actors,
            cfg.ray.episodes_per_actor,
            holds_state=not chat,
            eval_tasks=len(self._eval_tasks(bench)) if cfg.mode == "eval" else None,
        )
        self.pool = EnvPool(
            cfg.env.name,
            self.cfg_dict["env"],
            self.gateway,
            PoolSettings(
                actors,
                per_actor,
                cfg.ray.actor_num_cpus,
                cfg.ray.episode_timeout_s,
                cfg.ray.episode_retries,
                cfg.ray.env_resource,
                cfg.ray.env_resource_per_actor,
            ),
            owners=self.owners,
            prestarted=self.prestarted,
            executor=self.executor,
        )
        self.set_progress(stage="opening the MLflow store")
        mark("env-actors-requested")
        # MLflow's import, store and run creation take seconds: they go on in a thread beside the first episodes;
        # the first use of the tracker waits for them
        self.tracker = TrackerWhenReady(self._open_tracker, getattr(self.executor, "first_call", None))
        return bench, llm

    def _open_tracker(self) -> Tracker:
        cfg = self.cfg
        t = cfg.tracking
        uri = t.tracking_uri or default_tracking_uri(Path(cfg.output_dir))
        tracker = Tracker(t.mlflow, uri, t.experiment_name or cfg.experiment, Path(cfg.output_dir) / "mlflow-artifacts")
        self.notes.extend(tracker.notes)
        run_info = self.rd.read_mlflow_run() or {}
        tags = {
            "experiment": cfg.experiment,
            "seed": str(cfg.seed),
            "mode": cfg.mode,
            "run_dir": str(self.rd.root),
            **t.tags,
        }
        if t.parent_run_id:
            tags["mlflow.parentRunId"] = t.parent_run_id
        tracker.notes.clear()
        run_id = tracker.start(run_info, self.rd.root.name, tags, self.rd.write_mlflow_run)
        self.notes.extend(tracker.notes)
        jobs = self.rd.read_jobs()
        if jobs:
            tracker.set_tags({"ray_job_submission_id": jobs[-1]["submission_id"]})
        if run_id:
            self.rd.write_mlflow_run(
                {
                    "run_id": run_id,
                    "tracking_uri": uri,
                    "experiment_id": tracker.experiment_id,
                    "run_uid": (self.rd.read_mlflow_run() or {}).get("run_uid"),
                },
            )
            tracker.log_params(redact(self.cfg_dict))
        return tracker

    async def execute(self) -> Outcome:
        t0 = time.monotonic()
        try:
            bench, llm = self._setup()
            if self.cfg.mode == "eval":
                summary = await self._eval_only(bench)
            else:
                self.set_progress(stage="loading the splits")
                splits = load_splits(bench, self.cfg)
                self.notes.append(
                    f"tasks: {len(splits.train)} train / {len(splits.selection)} selection / {len(splits.test)} test"
                )
                unwinnable = bench.turns_note(
                    {"train": splits.train, "selection": splits.selection, "test": splits.test}, self.cfg.env.max_turns
                )
                if unwinnable:
                    self.notes.append(unwinnable)
                self.trainer = Trainer(
                    self.cfg,
                    self.rd,
                    llm,
                    self.pool,
                    cast(Tracker, self.tracker),  # a TrackerWhenReady forwards every Tracker call once it is open
                    splits,
                    self._initial_skill(bench),
                    on_progress=self.set_progress,
                )
                summary = await self.trainer.run()
            self._finished()
            return {
                "status": "ok",
                "exit": EXIT_OK,
                "summary": summary,
                "notes": self.notes,
                "run_dir": str(self.rd.root),
                "mlflow": self.rd.read_mlflow_run(),
                "elapsed_s": time.monotonic() - t0,
            }
        except (ConfigError, DataError, StateVersionError) as e:
            return self._fail(EXIT_CONFIG, str(e))
        except SimulatedInterrupt as e:
            return self._fail(EXIT_STOPPED, f"{e}; rerun the same command to resume")
        except BudgetExceeded as e:
            return self._fail(EXIT_STOPPED, f"{e.message}; state saved in {self.rd.root}")
        except (LLMError, InfraFailure) as e:
            return self._fail(EXIT_ERROR, getattr(e, "message", None) or str(e))
        except TrackingError as e:
            return self._fail(EXIT_ERROR, str(e))
        except Exception as e:  # noqa: BLE001 - report with traceback saved in the run dir
            return self._unexpected(e)
        finally:
            mark("driver-closing")
            await self._close()
            mark("driver-closed")

    def _finished(self) -> None:
        """The run ended whole: its MLflow run is marked finished, and a traceback an earlier command of it left
        (error.txt: a crash, or a dying run's last error after its command was killed) no longer describes it."""
        if self.tracker:
            self.tracker.finish("FINISHED")
        self.rd.clear_error()

    def _unexpected(self, e: Exception) -> Outcome:
        """An error no stage names: one line, its traceback in the run dir. A full disk (a run record that could not
        be written, also in an env actor) is one line saying so and what to do, with no traceback to keep on it."""
        if isinstance(e, OSError) and disk_full(e):
            return self._fail(EXIT_ERROR, f"the disk is full ({error_text(e)}): {FULL_DISK_FIX}")
        try:
            where = str(self.rd.write_error(traceback.format_exc()))
        except OSError as w:
            where = f"none kept: {error_text(w)}"
        return self._fail(
            EXIT_ERROR, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} (traceback in {where})"
        )

    def _fail(self, code: int, message: str) -> Outcome:
        tracker = self.tracker.opened() if self.tracker else None
        if tracker and tracker.run_id:
            try:
                tracker.finish("KILLED" if code == EXIT_STOPPED else "FAILED")
            except TrackingError as e:  # the run's own failure is the message; this one is a note beside it
                self.notes.append(f"could not mark the MLflow run ended: {e}")
        return {"status": "error", "exit": code, "message": message, "notes": self.notes, "run_dir": str(self.rd.root)}

    def _skill_text(self, key: str, value: str) -> str:
        """A skill document's text: as the command read it, or read here by the same rule."""
        return self.skills[key] if key in self.skills else read_skill_file(value, key)

    def _initial_skill(self, bench: Any) -> str:
        if self.cfg.skill_init:
            return normalize_markers(self._skill_text("skill_init", self.cfg.skill_init))
        return bench.seed_skill()

    def _eval_tasks(self, bench: Any) -> list[Any]:
        cfg = self.cfg
        split = cfg.eval.split
        limit = {"train": cfg.env.limit_train, "test": cfg.env.limit_test, "valid_unseen": cfg.env.limit_test}.get(
            split, cfg.env.limit_selection
        )
        return limit_tasks(bench.load_split(split), limit if split != "all" else 0)

    async def _eval_only(self, bench: Any) -> dict[str, Any]:
        cfg = self.cfg
        p = Path(cfg.eval.skill_path or "").expanduser()
        skill = normalize_markers(self._skill_text("eval.skill_path", cfg.eval.skill_path or ""))
        split = cfg.eval.split
        tasks = self._eval_tasks(bench)
        reps = cfg.optimizer.rollouts_per_task  # each task played that many times, scored by their mean
        self.progress.update(Progress(phase="eval", stage=f"eval:{split}", done=0, total=len(tasks) * reps))
        assert self.pool is not None, "the env pool starts before evaluation"
        res = await rollout_repeats(
            self.pool,
            tasks,
            skill,
            EpisodeContext(
                f"evalonly/{split}", False, cfg.env.max_turns, cfg.env.history_window, cfg.seed, f"eval:{split}"
            ),
            reps,
            cfg.optimizer.max_infra_failure_fraction,
            f"eval:{split}",
        )
        mark("episodes-done")
        stats = summarize(res, reps)
        task_scores = list(stats.tasks.values())  # the score's 95% interval over the tasks, with n
        self.rd.write_eval_results(split, [r.to_dict() for r in res])
        check_data(res, cfg.optimizer.max_data_error_fraction, f"eval:{split}")  # after the results are kept
        ledger = await LLMHandle(self.gateway).save_ledger()
        summary = Summary(
            experiment=cfg.experiment,
            mode="eval",
            skill_path=str(p),
            split=split,
            eval=stats.to_dict(),
            tokens=ledger["totals"],
            run_dir=str(self.rd.root),
            intervals={
                "eval": {
                    m: mean_interval([v[i] for v in task_scores]).to_dict() for i, m in enumerate(("hard", "soft"))
                }
            },
            rollouts_per_task=reps if reps > 1 else None,
        )
        self.rd.write_summary(summary)
        mark("summary-written")
        self._log_eval(stats, p)
        return summary.to_dict()

    def _log_eval(self, stats: Any, skill_path: Path) -> None:
        """An eval-only run's scores, skill and summary into its MLflow run."""
        if not self.tracker:
            return
        metrics = {
            "eval_hard": stats.hard,
            "eval_soft": stats.soft,
            "eval_infra_errors": stats.infra_errors,
            "eval_data_errors": stats.data_errors,
        }
        for t, v in stats.per_type.items():
            metrics.update({f"eval_hard.{t}": v["hard"], f"eval_soft.{t}": v["soft"]})
        self.tracker.log_metrics(metrics, 0)  # one batch: each is a store transaction, synced to disk
        self.tracker.log_artifact(skill_path, "skills")
        self.tracker.log_artifact(self.rd.summary_path)
        mark("eval-logged")

    async def _close(self) -> None:
        if self.gateway is not None:
            try:
                await self.executor.call(self.gateway, "close")
            except Exception:  # noqa: BLE001
                pass
            self.executor.stop(self.gateway)
        if self.pool is not None:
            self.pool.shutdown()

    def set_progress(self, kw: Optional[Progress] = None, **more: Any) -> None:
        """The trainer's progress calls; a new phase or step clears the stage it left behind."""
        kw = cast(Progress, {**(kw or {}), **more})  # `more`: Progress keys by name
        moved = ("phase" in kw and kw["phase"] != self.progress.get("phase")) or (
            "global_step" in kw and kw["global_step"] != self.progress.get("global_step")
        )
        if moved and "stage" not in kw:
            self.progress.pop("stage", None)
            self.progress.pop("done", None)
            self.progress.pop("total", None)
        self.progress.update(kw)

    def snapshot(self) -> Progress:
        snap = self.progress.copy()
        snap["notes"] = list(self.notes)
        if not plays_episodes(snap.get("stage", "")):
            # the last rollout's count would read as stuck
            snap.pop("done", None)
            snap.pop("total", None)
        elif self.pool is not None:
            snap["done"], snap["total"] = self.pool.episodes_done, self.pool.episodes_total
        if self.trainer is not None:
            counts = self.trainer.state.counts
            snap.update(
                Progress(accept=counts.accept, reject=counts.reject, skip=counts.skip, epochs=self.cfg.optimizer.epochs)
            )
            try:  # the whole run's planned episodes, for the overall bar and ETA
                plan = self.trainer.schedule.plan()
                snap["run_done"], snap["run_total"] = min(plan.done(self.trainer.state, snap), plan.total), plan.total
            except Exception:  # noqa: BLE001 - progress is best effort
                pass
        return snap


class TrackerWhenReady:
    """A Tracker being opened in a thread. Logging calls made before it is open (the seed skill's artifact, a step's
    metrics) are kept in order and sent by the opening thread once it is open, so no stage waits for MLflow; any other
    use waits until it is open. An error from opening or from a kept call is raised to the next use that waits.

    `start`, when given, is waited for first (at most `wait_s`): in one process MLflow's import (seconds of CPU) would
    hold the GIL from the imports the first model call needs, so it starts once that call went out (the executor sets
    the event). A use that has to wait for the tracker sets it too: a run that makes no model call before it needs the
    tracker (a finished run's command again, a resume past its last call) opens it at once instead of waiting out
    `wait_s` for a call that cannot come."""

    # calls whose result no caller reads: kept while the tracker opens (in one process, where it opens after the first
    # model call), then sent in the order they were made; a step's commit ends with `flush()`, which waits for all of
    # them. On Ray the tracker opens at once and every use waits for it: a sweep's trial stopped by its scheduler
    # right after a step has its MLflow run whatever the order of the step's report and its logging
    DEFERRED = frozenset({"log_artifact", "log_metrics", "log_params", "set_tags", "log_skill_history"})

    def __init__(
        self, open_tracker: Any, start: Optional[threading.Event] = None, wait_s: Optional[float] = FIRST_CALL_WAIT_S
    ):
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._kept: list[Callable[[Tracker], object]] = []
        self._tracker: Optional[Tracker] = None
        self._error: Optional[BaseException] = None
        self._start = start
        args = (open_tracker, wait_s)
        threading.Thread(target=self._open, args=args, name="mlflow-open", daemon=True).start()

    def _open(self, open_tracker: Any, wait_s: Optional[float]) -> None:
        try:
            if self._start is not None:
                self._start.wait(wait_s)
            mark("tracker-opening")
            self._tracker = open_tracker()
            mark("tracker-open")
            self._send_kept()
        except BaseException as e:  # noqa: BLE001 - raised to whoever uses the tracker
            self._error = e
        finally:
            with self._lock:
                self._kept.clear()
                self._done.set()

    def _send_kept(self) -> None:
        """Send the kept calls in order; calls made meanwhile join the queue until it is empty."""
        assert self._tracker is not None
        while True:
            with self._lock:
                if not self._kept:
                    self._done.set()  # under the lock: a call after this goes straight to the tracker
                    return
                call = self._kept.pop(0)
            call(self._tracker)

    def _wait(self) -> None:
        if self._start is not None and not self._done.is_set():
            self._start.set()  # the caller waits for the tracker: no model call has to go out first
        self._done.wait()

    def get(self) -> Tracker:
        self._wait()
        if self._error is not None:
            raise self._error
        assert self._tracker is not None
        return self._tracker

    def opened(self) -> Optional[Tracker]:
        """The tracker, or None when opening it failed (waits for the attempt)."""
        self._wait()
        return self._tracker

    def __getattr__(self, name: str) -> Any:
        if name in self.DEFERRED and self._start is not None:  # on Ray (no start event) every use waits, as before
            return lambda *args, **kwargs: self._call_or_keep(lambda t: getattr(t, name)(*args, **kwargs))
        return getattr(self.get(), name)

    def _call_or_keep(self, call: Callable[[Tracker], object]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._kept.append(call)
                return
        call(self.get())


# How often the driver rewrites the run directory's live progress record (progress.json).
PROGRESS_EVERY_S = 2.0


def plays_episodes(stage: str) -> bool:
    """Stages whose progress is counted in episodes: rollout, validate:*, eval*, slow_update:rollout."""
    return stage == "rollout" or stage.startswith(("validate", "eval")) or stage.endswith(":rollout")


def start_gateway(cfg: Config, run_dir: str, owners: list[Owner], spawn: Spawner = fresh) -> Any:
    """The run's LLM gateway actor, on this node: it writes the ledger and cache into the run directory, and it must
    not die with a worker node. The command starts it beside the driver actor (both processes come up at once).
    It gets the typed `llm` section, as checked."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from skillopt_ray.engine.ray_executor import RayExecutor

    rd = RunDir(run_dir)
    return RayExecutor(spawn).start(
        GatewayHost,
        ActorOptions(
            scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        ),
        cfg.llm,
        str(rd.cache_path) if cfg.llm.cache_mode != "off" else None,
        str(rd.ledger_path),
        owners,
        shards=int(cfg.ray.gateway_shards),
    )


def driver_options(ray_cfg: RayConfig) -> ActorOptions:
    """Ray options for the driver actor. With ray.driver_node=local (the default) it runs on the calling
    process's node, where that process has just made the run directory; `any` lets Ray place it (the run
    directory must then be on a path every node mounts; the driver checks that it can see it)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    opts = ActorOptions(num_cpus=0)
    if ray_cfg.driver_node == "local":
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        )
    return opts


def run_dir_unseen(run_dir: str, owner: Optional[Owner]) -> Optional[str]:
    """Why this node cannot hold the run (the run directory, made before the driver starts, is not here), or None."""
    if Path(run_dir).is_dir():
        return None
    import ray

    here = ray.get_runtime_context().get_node_id()
    made_on = f" on node {str(owner['node'])[:12]}" if owner and owner.get("node") and owner["node"] != here else ""
    return (
        f"the driver actor on node {ray.util.get_node_ip_address()} ({here[:12]}) cannot see the run directory {run_dir} "
        f"(made{made_on} by the command that started the run): put output_dir on a filesystem every node mounts at the "
        "same path, or set ray.driver_node=local so the driver runs beside the run directory"
    )


class Driver:
    """A run, its live progress record and the progress calls of the command that follows it (the Ray actor
    `DriverActor`, or an object in the command's own process)."""

    ray_name = "DriverActor"
    ray_options: ActorOptions = {"num_cpus": 0, "max_concurrency": 8}

    def __init__(
        self,
        cfg: Config,
        run_dir: str,
        owner: Optional[Owner] = None,
        gateway: Any = None,
        env_actors: Optional[list[Any]] = None,
        skills: Optional[SkillTexts] = None,
        executor: Optional[Executor] = None,
    ):
        from skillopt_ray.base.lifeline import identity, watch

        watch([owner], "driver actor")
        mark("driver-started")
        self._unseen = run_dir_unseen(run_dir, owner)  # checked before Run makes a stray directory on this node
        self._run_dir = run_dir
        self._run = (
            None if self._unseen else Run(cfg, run_dir, [owner, identity()], gateway, env_actors, skills, executor)
        )
        self._ledger: dict[str, Any] = {}
        self._eta = Eta()

    async def run(self) -> Outcome:
        if self._run is None:
            return {
                "status": "error",
                "exit": EXIT_CONFIG,
                "message": self._unseen,
                "notes": [],
                "run_dir": self._run_dir,
            }
        publisher = asyncio.create_task(self._publish_progress())
        try:
            return await self._run.execute()
        finally:
            publisher.cancel()
            await self._write_progress(final=True)

    async def _publish_progress(self) -> None:
        """Keep `progress.json` in the run directory current, so pages and tools that only read the run directory
        (the dashboard) see the stage, the episode counts and the ETA without asking this actor."""
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            await self._write_progress()

    async def _write_progress(self, final: bool = False) -> None:
        try:
            snap = await self.progress()
            snap["eta_s"] = None if final else self._eta.observe(snap.get("run_done"), snap.get("run_total"))
            if final:
                if snap.get("phase") in ("done", "final"):
                    snap["phase"] = "done"
            snap["written_at"] = time.time()
            RunDir(self._run_dir).write_progress(snap)
        except Exception:  # noqa: BLE001 - the live record is best effort; the run's own records are not
            pass

    async def progress(self) -> Progress:
        if self._run is None:
            return Progress(phase="starting")
        snap = self._run.snapshot()
        if self._run.gateway is not None:
            self._ledger = await ledger_snapshot(self._run.executor, self._run.gateway) or self._ledger
        if self._ledger:
            snap["tokens"] = self._ledger["totals"]["tokens"]
            snap["cost_usd"] = self._ledger["totals"]["cost_usd"]
        return snap


async def ledger_snapshot(executor: Executor, gateway: Any) -> Any:
    """The gateway's ledger snapshot, or None once the gateway is gone (the end of a run). In one process a call in
    flight when the gateway stops is cancelled where it ran, which reaches this caller as a CancelledError: when the
    gateway was stopped, that is the gateway's end, not this caller's (it crashed a finished run's command with a
    traceback); otherwise it is this caller's own cancel (Ctrl-C) and goes on."""
    try:
        return await executor.call(gateway, "ledger_snapshot")
    except asyncio.CancelledError:
        if not getattr(gateway, "stopped", False):  # a local part stopped (LocalActor.stop); never a Ray handle
            raise
        return None
    except Exception:  # noqa: BLE001 - gateway gone at the end of a run
        return None


def __getattr__(name: str) -> Any:
    """`DriverActor`: the Ray actor class of Driver, made (and Ray imported) on first use."""
    if name != "DriverActor":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from skillopt_ray.base.ray_class import remote_class

    return remote_class(Driver)
