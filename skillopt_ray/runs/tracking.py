"""MLflow tracking with an explicit run id (safe from actors and threads).

Default store: sqlite under the output directory, so no server is needed.

Kill safety: a new sqlite store is built (every schema migration) in a private file next to
its final name and linked into place only when complete, so a kill at any moment leaves
either no store or a whole one. A store that an older version left half-made (schema not at
MLflow's head revision and no runs in it) is moved aside and rebuilt, with a note; one that
holds runs is never touched (the error says how to upgrade it). Resuming the MLflow run
retries transient store errors and never starts a second run silently.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Optional, TypeVar

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base.collector import imports_without_collector
from skillopt_ray.runs.records import MlflowRun

T = TypeVar("T")
RUN_UID_TAG = "skillopt.run_uid"
# MLflow 3's UI opens an experiment by its kind: GenAI experiments on their traces page, model-development ones on
# the runs table with metric charts. A skill-training run is the latter (the UI would otherwise guess from the contents).
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"

# Metric groups: every metric keeps the trainer's name under a group prefix, so MLflow's charts section shows one
# group per prefix. The group of a name is the first rule that matches it; anything new lands in other/.
METRIC_GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("tokens", lambda n: n.startswith(("tokens", "cost_usd"))),
    ("time", lambda n: n.endswith("_s") or n.startswith("time")),
    ("skill", lambda n: n in ("skill_version", "skill_len", "candidate_skill_len")),
    ("gate", lambda n: n.startswith("gate_")),  # the paired gate's difference, interval and p (optimizer.gate_test)
    (
        "counts",
        lambda n: (
            n in ("accepted", "slow_update_accepted", "rollout_n", "tasks_compared", "edit_budget")
            or n.startswith("n_")
            or n.endswith(("_errors", "_count", "_fallbacks", "_n_tasks"))
        ),
    ),
    (
        "score",
        lambda n: (
            n.endswith(("_score", "_hard", "_soft", "_ci_lo", "_ci_hi"))
            or n.startswith(("test_hard", "test_soft", "eval_hard", "eval_soft"))
        ),
    ),
)


# One MLflow key per quantity: the trainer logs the initial skill's selection score as `selection_score` (step 0) and
# the current skill's after every step as `current_score`; both are the current skill's score, so step 0 goes under
# score/current_score and the chart starts at the initial skill.
METRIC_RENAMES = {"selection_score": "current_score"}


def metric_key(name: str) -> str:
    """The MLflow key of a trainer metric: `current_score` -> `score/current_score`, `tokens.target.rollout` ->
    `tokens/tokens.target.rollout`, `wall_time_s` -> `time/wall_time_s`, `accepted` -> `counts/accepted`. Names that
    already carry a group (`x/y`) are kept."""
    if "/" in name:
        return name
    name = METRIC_RENAMES.get(name, name)
    for group, matches in METRIC_GROUPS:
        if matches(name):
            return f"{group}/{name}"
    return f"other/{name}"


def ui_link(record: MlflowRun, base: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI page of a run (mlflow_run.json's record), in the model-training view: MLflow 3's UI starts in its
    GenAI view unless the link asks (`workflowType`, remembered by the browser once chosen). Without a run, the
    experiment's runs table (`/runs`; the experiment's bare page opens its Traces tab), and without an experiment,
    the experiments list in the same view."""
    exp, run = record.get("experiment_id"), record.get("run_id")
    if exp and run:
        page = f"#/experiments/{exp}/runs/{run}"
    elif exp:
        page = f"#/experiments/{exp}/runs"
    else:
        page = "#/experiments"
    return f"{base}/{page}?workflowType=machine_learning"


def sweep_run_name(tags: dict[str, str], default: str) -> str:
    """A sweep trial's run name from its swept values (`learning_rate=4 gate_metric=soft seed=43`); `default` otherwise."""
    swept = {k[len("sweep.param.") :]: v for k, v in tags.items() if k.startswith("sweep.param.")}
    if not swept:
        return default
    short = {k: k.rsplit(".", 1)[-1] for k in swept}
    clash = {s for s in short.values() if list(short.values()).count(s) > 1}
    parts = [f"{k if short[k] in clash else short[k]}={v}" for k, v in sorted(swept.items())]
    if "seed" in tags and "seed" not in short.values():
        parts.append(f"seed={tags['seed']}")
    return " ".join(parts)[:250]


class TrackingError(RuntimeError):
    """The tracking store cannot be used; the message is one line that names the store and what to do."""


def default_tracking_uri(output_dir: str | Path) -> str:
    return f"sqlite:///{Path(output_dir).resolve() / 'mlflow.db'}"


def sqlite_path(uri: Optional[str]) -> Optional[Path]:
    """The file behind a `sqlite:///` URI (None for other stores and in-memory databases)."""
    if not uri or not uri.startswith("sqlite:///"):
        return None
    raw = uri[len("sqlite:///") :].split("?", 1)[0]
    if not raw or raw == ":memory:":
        return None
    return Path(raw).expanduser().resolve()


def _head_revision() -> str:
    from skillopt_ray.base.private_apis import mlflow_schema_head

    return mlflow_schema_head()


def store_state(path: Path) -> tuple[str, str]:
    """('ok' | 'empty' | 'half_made' | 'outdated', detail) for an existing sqlite store file."""
    if path.stat().st_size == 0:
        return "empty", "the file is empty"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            rev = None
            if "alembic_version" in tables:
                row = db.execute("SELECT version_num FROM alembic_version").fetchone()
                rev = row[0] if row else None
            runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] if "runs" in tables else 0
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        return "half_made", f"it is not a readable sqlite database ({e})"
    head = _head_revision()
    if rev == head:
        return "ok", ""
    if not tables:
        return "empty", "it has no tables"
    detail = f"schema revision {rev or 'none'}, MLflow {_mlflow_version()} expects {head}"
    return ("half_made" if runs == 0 else "outdated"), detail


def _mlflow_version() -> str:
    import mlflow

    return mlflow.__version__


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _drop_stale_builds(path: Path) -> None:
    """Private build files of processes that died mid-build (a kill during creation)."""
    for p in path.parent.glob(f".{path.name}.building-*"):  # the build file and sqlite's -journal/-wal beside it
        m = re.search(r"\.building-(\d+)-", p.name)
        if m and not _pid_alive(int(m.group(1))):
            p.unlink(missing_ok=True)


def _build(path: Path) -> None:
    """Create and migrate a store privately, then link it into place (never over an existing one)."""
    from skillopt_ray.base.private_apis import mlflow_create_sqlite_store

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.building-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        mlflow_create_sqlite_store(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and fails rather than replace a store another process just finished
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)


def ensure_store(
    uri: Optional[str], log: Callable[[str], None] = lambda m: print(f"note: {m}", file=sys.stderr)
) -> None:
    """Make sure a sqlite tracking store exists whole before MLflow opens it (no-op for other URIs)."""
    path = sqlite_path(uri)
    if path is None:
        return
    if path.exists():
        _drop_stale_builds(path)
        state, detail = store_state(path)
        if state == "ok":
            return
        if state == "outdated":
            raise TrackingError(
                f"MLflow store {path} has runs but an old schema ({detail}): back it up, then run "
                f"`mlflow db upgrade sqlite:///{path}`, or set tracking.tracking_uri to another store"
            )
        aside = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        try:
            os.replace(path, aside)
            log(
                f"MLflow store {path} was left half-made by an interrupted start ({detail}; no runs in it): "
                f"moved to {aside.name} and created again"
            )
        except FileNotFoundError:
            pass  # another process moved it aside first
    else:
        _drop_stale_builds(path)
    _build(path)


def _retrying(what: str, uri: Optional[str], fn: Callable[[], T], attempts: int = 5, base_s: float = 0.5) -> T:
    """Call fn, retrying store errors that may pass (locks, timeouts, a server restarting); a run that is
    not found is not retried (the caller decides). After the last attempt: one line, TrackingError."""
    from mlflow.exceptions import MlflowException

    for i in range(attempts):
        try:
            return fn()
        except MlflowException as e:
            if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "RESOURCE_ALREADY_EXISTS", "INVALID_PARAMETER_VALUE"):
                raise
            err: Exception = e
        except (OSError, sqlite3.Error, ConnectionError, TimeoutError) as e:
            err = e
        if i + 1 < attempts:
            time.sleep(base_s * 2**i)
    first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
    raise TrackingError(f"MLflow store {uri} failed to {what} after {attempts} attempts: {first}")


def _not_found(e: Exception) -> bool:
    return getattr(e, "error_code", "") == "RESOURCE_DOES_NOT_EXIST"


def flatten(d: Mapping[str, object], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = str(v)[:500]
    return out


class Tracker:
    """Logs one training run. A disabled tracker accepts every call and does nothing."""

    @property
    def _rid(self) -> str:
        """The open run's id (every logging call comes after start())."""
        assert self.run_id is not None, "the MLflow run is not started"
        return self.run_id

    def __init__(self, enabled: bool, tracking_uri: str, experiment: str, artifact_root: Path):
        self.enabled = enabled
        self.run_id: Optional[str] = None
        self.notes: list[str] = []
        if not enabled:
            return
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        with imports_without_collector():
            from mlflow.exceptions import MlflowException
            from mlflow.tracking import MlflowClient

        self.uri = tracking_uri
        ensure_store(tracking_uri, self.notes.append)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        exp = _retrying("read experiments", tracking_uri, lambda: self.client.get_experiment_by_name(experiment))
        if exp is None:
            # a tracking server keeps artifacts where it is configured to (they travel through it, whichever node
            # logs them); a local store gets an absolute folder beside the run
            remote = tracking_uri.lower().startswith(("http://", "https://"))  # HTTP:// is http too
            location = None if remote else artifact_root.resolve().as_uri()
            if not remote:
                artifact_root.mkdir(parents=True, exist_ok=True)
            try:
                self.experiment_id = _retrying(
                    "create the experiment",
                    tracking_uri,
                    lambda: self.client.create_experiment(experiment, artifact_location=location),
                )
            except MlflowException as e:
                if e.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise TrackingError(
                        f"MLflow store {tracking_uri} refused experiment {experiment!r}: {str(e).splitlines()[0]}"
                    ) from None
                exp = _retrying(
                    "read experiments", tracking_uri, lambda: self.client.get_experiment_by_name(experiment)
                )
                assert exp is not None, "the experiment that already exists can be read"
                self.experiment_id = exp.experiment_id  # created by a concurrent run (sweep trials)
        else:
            self.experiment_id = exp.experiment_id
        self.run_dir: Optional[Path] = None
        if exp is None or EXPERIMENT_KIND_TAG not in (exp.tags or {}):
            try:  # a store that refuses the tag still tracks; the UI then guesses the kind
                self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            except MlflowException:
                pass

    def start(
        self, record: MlflowRun, run_name: str, tags: dict[str, str], save: Callable[[MlflowRun], object]
    ) -> Optional[str]:
        """Resume the MLflow run that `record` (the run directory's mlflow_run.json) names, else create one.

        Creation is made idempotent across kills: a run uid is saved (via `save`) before the run is created
        and tagged on it, so a rerun after a kill between the two finds that run instead of forking a second."""
        if not self.enabled:
            return None
        from skillopt_ray.config import redact

        tags = {k: str(v) for k, v in redact(dict(tags)).items()}  # a user's tag may hold a token: masked like params
        self.run_dir = Path(tags["run_dir"]) if tags.get("run_dir") else None
        tags = {**source_tags(self.run_dir), **tags}
        run_name = sweep_run_name(tags, run_name)
        run_id = record.get("run_id")
        if run_id:
            resumed = self._resume_run(run_id, tags, run_name)
            if resumed:
                return resumed
        uid = record.get("run_uid") if not run_id else None
        if uid:
            found = self._resume_interrupted_run(uid)
            if found:
                return found
        uid = uid or uuid.uuid4().hex
        save({"run_uid": uid, "tracking_uri": self.uri, "experiment_id": self.experiment_id})
        return self._create_run(uid, tags, run_name)

    def _resume_run(self, run_id: str, tags: dict[str, str], run_name: str) -> Optional[str]:
        """Reopen the run the record names, with this command's source tags and name; None (with a note) when the
        store no longer holds it."""
        from mlflow.exceptions import MlflowException

        try:
            run = _retrying("read the run to resume", self.uri, lambda: self.client.get_run(run_id))
            self.run_id = run.info.run_id
            self.set_tags({k: v for k, v in tags.items() if k.startswith("mlflow.source.")})  # this command's
            _retrying(
                "mark the resumed run running",
                self.uri,
                lambda: self.client.update_run(
                    self._rid, status="RUNNING", name=run_name if run.info.run_name != run_name else None
                ),
            )
            return self.run_id
        except MlflowException as e:
            if not _not_found(e):
                raise TrackingError(
                    f"MLflow store {self.uri} failed to read run {run_id}: {str(e).splitlines()[0][:300]}"
                ) from None
            self.notes.append(
                f"MLflow run {run_id} is not in {self.uri} (store replaced or deleted): logging to a new run"
            )
        return None

    def _resume_interrupted_run(self, uid: str) -> Optional[str]:
        """The run tagged with `uid` if a killed start created it after saving the uid, marked running again."""
        quoted = uid.replace("'", "")
        found = _retrying(
            "search for the interrupted run",
            self.uri,
            lambda: self.client.search_runs(
                [self.experiment_id], filter_string=f"tags.`{RUN_UID_TAG}` = '{quoted}'", max_results=1
            ),
        )
        if not found:
            return None
        self.run_id = found[0].info.run_id
        _retrying(
            "mark the resumed run running",
            self.uri,
            lambda: self.client.update_run(self._rid, status="RUNNING"),
        )
        return self.run_id

    def _create_run(self, uid: str, tags: dict[str, str], run_name: str) -> str:
        """A new run tagged with `uid`, started when the run directory was."""
        run = _retrying(
            "create the run",
            self.uri,
            lambda: self.client.create_run(
                self.experiment_id,
                start_time=started_ms(self.run_dir),
                run_name=run_name,
                tags={**tags, RUN_UID_TAG: uid},
            ),
        )
        new_id: str = run.info.run_id
        self.run_id = new_id
        return new_id

    def log_params(self, params: Mapping[str, object]) -> None:
        """The run's config as params; `tracking.tags` are not params (the run carries them as tags)."""
        if not self.enabled:
            return
        from mlflow.entities import Param

        flat = {k: v for k, v in flatten(params).items() if not k.startswith("tracking.tags.")}
        existing = self.client.get_run(self._rid).data.params
        todo = [Param(k, v) for k, v in flat.items() if k not in existing]
        for i in range(0, len(todo), 100):
            self.client.log_batch(self._rid, params=todo[i : i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        ms = [Metric(metric_key(k), float(v), ts, step) for k, v in metrics.items() if v is not None]
        if ms:
            self.client.log_batch(self._rid, metrics=ms)

    def log_skill_history(self) -> None:
        """`skill_history.html` (versions, each step's decision and diff) and `skill_versions.json` (version, made by,
        epoch, step, selection score, length), written into the run directory and logged as artifacts. Called by
        `finish` (every run with skill versions ends with its history page) or by whoever wants it earlier; logging
        metrics never does."""
        if not self.enabled or self.run_dir is None:
            return
        root = self.run_dir
        if not (root / "skills").is_dir() or not any((root / "skills").iterdir()):
            return  # no skill versions (an eval-only run): no history to show

        from skillopt_ray.runs.report import load, skill_history_html
        from skillopt_ray.runs.rundir import RunDir

        try:
            story = load(root)
            rows: list[JSONObject] = [
                {
                    "version": v.number,
                    "made_by": v.made_by,
                    "epoch": v.epoch,
                    "step": v.step,
                    "selection_score": v.score,
                    "length": len(v.text),
                    "artifact": RunDir.skill_rel(v.number),
                }
                for v in story.versions
            ]
            for path in RunDir(root).write_skill_history(rows, skill_history_html(root)):
                self.client.log_artifact(self._rid, str(path))
        except Exception as e:  # noqa: BLE001 - a view of the history never stops a run
            self.notes.append(f"skill history not logged to MLflow: {type(e).__name__}: {e}")

    def flush(self) -> None:
        """Every call made so far has reached the store. This tracker's calls are synchronous, so nothing waits here;
        the driver's TrackerWhenReady waits until it is open and has sent the calls it kept (a step's commit)."""

    def log_artifact(self, path: str | Path, artifact_path: Optional[str] = None) -> None:
        if self.enabled:
            self.client.log_artifact(self._rid, str(path), artifact_path)

    def set_tags(self, tags: dict[str, str]) -> None:
        if self.enabled:
            for k, v in tags.items():
                self.client.set_tag(self._rid, k, v)

    def finish(self, status: str = "FINISHED") -> None:
        """End the run: log its skill history page, then mark it `status`."""
        if self.enabled and self.run_id:
            self.log_skill_history()
            _retrying(
                f"mark the run {status}",
                self.uri,
                lambda: self.client.set_terminated(self._rid, status=status),
                attempts=3,
            )


def started_ms(run_dir: Optional[Path]) -> Optional[int]:
    """When the run's first command began (its run directory's sessions), in ms: an MLflow run opened later (its
    store opens beside the first episodes) still shows the run's whole duration."""
    if run_dir is None:
        return None
    from skillopt_ray.runs.rundir import RunDir

    try:
        sessions = RunDir(run_dir).read_sessions()
        return int(time.mktime(time.strptime(sessions[0]["started"], "%Y-%m-%dT%H:%M:%S")) * 1000)
    except Exception:  # noqa: BLE001 - no sessions yet (a run opened outside the CLI): MLflow's own start
        return None


def source_tags(run_dir: Optional[Path]) -> dict[str, str]:
    """The tags MLflow's UI shows as a run's source, version and user, from the provenance the command that made
    the run directory recorded (skillopt_ray.cli.provenance)."""
    if run_dir is None:
        return {}
    from skillopt_ray.runs.rundir import RunDir

    try:
        prov = RunDir(run_dir).read_provenance()
    except Exception:  # noqa: BLE001 - a run directory from before provenance was kept
        return {}
    if not prov:
        return {}
    tags = {
        "mlflow.source.name": prov.get("entry_point") or "",
        "mlflow.source.type": "LOCAL",
        "mlflow.user": prov.get("user") or "",
        "skillopt.command": prov.get("command_line", "")[:5000],
        "skillopt.version": prov.get("version") or "",
        "skillopt.code_hash": prov.get("code_hash") or "",
    }
    git = prov.get("git")
    if git and git.get("commit"):
        tags["mlflow.source.git.commit"] = git["commit"]
        tags["skillopt.git_dirty"] = str(bool(git.get("dirty"))).lower()
        branch = git.get("branch")
        if branch:
            tags["mlflow.source.git.branch"] = branch
    return {k: v for k, v in tags.items() if v}
