"""Launch and stop runs from the dashboard's form, through the same front door as the command line.

The form becomes Hydra overrides, which are checked by the CLI's own composition and checks before anything
starts; the run is then the exact command shown on the page (`python -m skillopt_ray ...`), started as a local
process in its own session, or submitted as a Ray job when a cluster address is given. Stopping interrupts the
command as Ctrl-C would (SIGTERM and SIGKILL to its process group follow if it does not end), or stops the job;
rerunning the same command resumes the run from its directory. A form that came over HTTP is held to the limits in
`limits.py` first.
Keys are never part of the command: the CLI reads them from the environment as always.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypedDict

from skillopt_envs.jsontypes import JSONObject, JSONValue

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.cli.preflight import Checked
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.schema import Config
from skillopt_ray.dashboard.keys import (
    MLFLOW_SECRETS,
    endpoint_of,
    is_http,
    refuse_key_redirects,
    tracking_home,
    tracking_is_home,
)
from skillopt_ray.dashboard.limits import (
    PathPolicy,
    check_choice,
    group_options,
    refuse_from_page,
    refuse_group_path,
    refuse_unsafe_overrides,
)

# The form: name -> (override key, kind). Kinds: choice lists come from the config tree (see `form_schema`).
FIELDS: dict[str, tuple[str, str]] = {
    "experiment": ("+experiment", "choice"),
    "llm": ("llm", "choice"),
    "target_model": ("llm.target.model", "text"),
    "optimizer_model": ("llm.optimizer.model", "text"),
    "base_url": ("llm.base_url", "text"),
    "learning_rate": ("optimizer.learning_rate", "int"),
    "min_learning_rate": ("optimizer.min_learning_rate", "int"),
    "lr_schedule": ("optimizer.lr_schedule", "choice"),
    "epochs": ("optimizer.epochs", "int"),
    "batch_size": ("optimizer.batch_size", "int"),
    "gate_metric": ("optimizer.gate_metric", "choice"),
    "slow_update": ("optimizer.slow_update", "bool"),
    "meta_skill": ("optimizer.meta_skill", "bool"),
    "seed": ("seed", "int"),
    "smoke": ("+smoke", "choice"),
}
LOG_LINES = 2000
RUN_DIR_LINE = "run directory: "  # how the CLI names the run directory it opened
# A form's extra overrides are a handful; Hydra parses thousands for seconds each check (8,000: 10 s).
MAX_EXTRA_OVERRIDES = 200
MAX_NESTING = 16  # brackets inside one override: a config value is a list of lists at most
STOP_GRACE_S = 30.0  # after SIGINT, how long a run may take to save and end before its process group is terminated


class FormField(TypedDict):
    """One field of the launch form: its kind, its choices and what the config uses when it is left empty."""

    kind: str  # choice | text | int | bool
    placeholder: JSONValue
    choices: Optional[list[str]]
    required: bool


class LaunchView(TypedDict):
    """A launch as the page lists it (GET /api/launches)."""

    id: str
    command: str
    run_dir: str
    status: str
    started: float
    job_id: str
    resumable: bool
    log: list[str]


def form_schema(conf_dir: Optional[Path] = None) -> dict[str, FormField]:
    """The form's fields: kind, choices and the value the config uses when the field is left empty.

    Only filled fields become overrides, so an experiment's or size preset's own values (a `+smoke=tiny` batch
    size, say) are not overwritten by the form's defaults."""
    from skillopt_ray.cli.compose import CONF_DIR, experiments
    from skillopt_ray.config import OptimizerConfig

    conf = Path(conf_dir or CONF_DIR)
    opt = OptimizerConfig()

    def names(group: str) -> list[str]:
        return sorted(p.stem for p in (conf / group).glob("*.yaml"))

    def field_(
        kind: str, placeholder: JSONValue = "", choices: Optional[list[str]] = None, required: bool = False
    ) -> FormField:
        return FormField(kind=kind, placeholder=placeholder, choices=choices, required=required)

    return {
        "experiment": field_("choice", choices=experiments(conf), required=True, placeholder="alfworld"),
        "llm": field_("choice", "embedded", names("llm")),
        "target_model": field_("text", "the preset's"),
        "optimizer_model": field_("text", "the preset's"),
        "base_url": field_("text", "the preset's"),
        "learning_rate": field_("int", opt.learning_rate),
        "min_learning_rate": field_("int", opt.min_learning_rate),
        "lr_schedule": field_("choice", opt.lr_schedule, ["cosine", "linear", "constant", "autonomous"]),
        "epochs": field_("int", opt.epochs),
        "batch_size": field_("int", opt.batch_size),
        "gate_metric": field_("choice", opt.gate_metric, ["hard", "soft", "mixed"]),
        "slow_update": field_("bool", opt.slow_update),
        "meta_skill": field_("bool", opt.meta_skill),
        "seed": field_("int", 42),
        "smoke": field_("choice", "none", names("smoke")),
        "extra": field_("text", "key=value ..."),
    }


# The fields whose placeholders come from the presets chosen in the form (their composed config).
PRESET_FIELDS = ("experiment", "smoke", "llm")
PLACEHOLDER_FROM = {
    "target_model": "llm.target.model",
    "optimizer_model": "llm.optimizer.model",
    "base_url": "llm.target.base_url",
    **{name: key for name, (key, _kind) in FIELDS.items() if key.startswith("optimizer.") or key == "seed"},
}


def preset_placeholders(presets: dict[str, str], lock: threading.Lock) -> JSONObject:
    """What the empty fields mean for these presets: the composed config's values (a `+smoke=tiny` run's epochs and
    schedule, not the paper's), by field name."""
    from skillopt_ray.cli.compose import absolute, compose, plain

    overrides = []
    for name in PRESET_FIELDS:
        value = str(presets.get(name) or "")
        if value:
            check_choice(name, value)
            overrides.append(f"{FIELDS[name][0]}={value}")
            refuse_group_path(overrides[-1], group_options())
    with lock:  # Hydra's composition uses process-wide state
        try:
            config = compose(overrides)
        except UsageError:  # a benchmark that needs its tasks folder (custom): the other values do not depend on it
            config = compose([*overrides, "env.data_dir=."])
    data = plain(absolute(config))
    out: JSONObject = {}
    for name, dotted in PLACEHOLDER_FROM.items():
        node: Any = data
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[name] = node if node is not None else "the preset's"
    return out


def whole_number(name: str, value: JSONValue) -> int:
    """A form's number field as an int; UsageError for 1.5, true, 1e999, a list or text that is not one."""
    bad = UsageError(f"{name}={str(value)[:40]}: a whole number is needed")
    if isinstance(value, bool) or isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise bad
    try:
        return int(value)  # type: ignore[arg-type]  # a list or an object raises TypeError
    except (TypeError, ValueError, OverflowError):
        raise bad from None


def nesting_problem(overrides: list[str]) -> None:
    """UsageError for an override nesting lists or dicts deeper than a config does (Hydra's parser recurses)."""
    for one in overrides:
        depth = deepest = 0
        for ch in one:
            depth += 1 if ch in "[{(" else -1 if ch in "]})" else 0
            deepest = max(deepest, depth)
        if deepest > MAX_NESTING:
            raise UsageError(f"{one[:40]}...: nested {deepest} deep; the page takes at most {MAX_NESTING} levels")


def overrides_from_form(form: JSONObject) -> list[str]:
    """Hydra overrides for the filled fields (empty ones keep the config's value), then the free-form extras."""
    out: list[str] = []
    for name, (key, kind) in FIELDS.items():
        value = form.get(name)
        if value is None or value == "":
            continue
        if kind == "choice":
            check_choice(name, str(value))
        elif kind == "bool":
            if str(value).lower() not in ("true", "false"):
                raise UsageError(f"{name}={value!r}: use true or false")
            value = str(value).lower()
        elif kind == "int":
            value = whole_number(name, value)
        out.append(f"{key}={value}")
    extra = str(form.get("extra") or "").strip()
    if extra:
        try:
            out += shlex.split(extra)
        except ValueError as e:
            raise UsageError(f"extra overrides: {e}") from None
        if len(out) > MAX_EXTRA_OVERRIDES:
            raise UsageError(
                f"{len(out)} overrides: the page takes at most {MAX_EXTRA_OVERRIDES} (the command line takes more)"
            )
    nesting_problem(out)
    return out


def _compose_typed(overrides: list[str], lock: threading.Lock) -> Config:
    """The form's run config, composed and validated as the command line does it (cli.compose), paths resolved."""
    from skillopt_ray.cli.compose import absolute, compose

    with lock:  # Hydra's composition uses process-wide state
        return absolute(compose(overrides))


# Settings that say where a key is sent (an endpoint URL, the tracking server, a search proxy, which variable holds
# the key): the preset's values for them are where its keys are meant to go.
KEY_SETTINGS = ("llm.", "tracking.", "env.options.search_")


def _keeps(override: str, groups: Any) -> bool:
    key = override.split("=", 1)[0].lstrip("+~")
    return key in groups or not key.startswith(KEY_SETTINGS)


def preset_config(overrides: list[str], lock: threading.Lock, composed: Optional[PlainConfig] = None) -> PlainConfig:
    """The form's config with every setting of where a key goes left as its presets set it (the config groups and
    the other overrides, a custom experiment's env.data_dir say, kept): where its keys are meant to go. A form that
    sets none of them is its presets' config (`composed`, when given): not composed again."""
    from skillopt_ray.cli.compose import plain

    groups = group_options()
    kept = [o for o in overrides if _keeps(o, groups)]
    if composed is not None and kept == overrides:
        return composed
    return plain(_compose_typed(kept, lock))


def validate(
    overrides: list[str],
    lock: threading.Lock,
    policy: Optional[PathPolicy] = None,
    endpoints: frozenset[str] = frozenset(),
) -> Checked:
    """The CLI's composition and checks before anything starts, once (cli.compose, cli.preflight): the checked run
    that the launched process takes as it is (cli.handoff). Raises UsageError with the CLI's one-line message; a
    check leaves no folder behind (the run makes its output folder).

    With a `policy` (a form that came over HTTP), overrides that reach past plain values are refused before Hydra
    sees them, the resolved paths are checked before any file they name is read, and a key goes to no host but its
    preset's and the `endpoints` the user allowed."""
    from skillopt_ray.cli.compose import plain
    from skillopt_ray.cli.preflight import preflight

    if policy is not None:
        refuse_unsafe_overrides(overrides)
    config = _compose_typed(overrides, lock)
    if policy is not None:
        data = plain(config)
        refuse_from_page(data, policy)
        refuse_key_redirects(data, preset_config(overrides, lock, data), endpoints)
    return preflight(config, make_output=False)


def display_command(overrides: list[str]) -> str:
    return shlex.join(["python", "-m", "skillopt_ray", *overrides])


@dataclass
class Launch:
    """One run started from the page: its command, where it runs, and its output so far."""

    id: str
    overrides: list[str]
    command: str
    run_dir: str = ""
    started: float = field(default_factory=time.time)
    job_id: str = ""  # a Ray job's submission id; empty for a local process
    process: Optional[subprocess.Popen] = None
    log: deque = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    stopped: bool = False

    def status(self, jobs: Any = None) -> str:
        if self.job_id:
            return str(jobs.get_job_status(self.job_id)).lower().replace("jobstatus.", "") if jobs else "submitted"
        if self.process is None:
            return "unknown"
        code = self.process.poll()
        if code is None:
            return "stopping" if self.stopped else "running"
        return "stopped" if self.stopped else ("finished" if code == 0 else f"exited {code}")

    def to_dict(self, jobs: Any = None) -> LaunchView:
        return LaunchView(
            id=self.id,
            command=self.command,
            run_dir=self.run_dir,
            status=self.status(jobs),
            started=self.started,
            job_id=self.job_id,
            resumable=self.process is not None and self.process.poll() not in (None, 0),
            log=list(self.log)[-200:],
        )


def _escalate(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM, then SIGKILL, to the process group of a run that did not end after SIGINT."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        grace_s = 10.0


def _follow(launch: Launch) -> None:
    """Keep the run's output in the launch's log; when a stopped run ends, end its MLflow run and say how to resume."""
    proc = launch.process
    assert proc is not None and proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        launch.log.append(line)
        if line.startswith(RUN_DIR_LINE):  # the CLI's own word wins over the directory predicted at launch
            launch.run_dir = line[len(RUN_DIR_LINE) :].strip()
    proc.wait()
    if not launch.stopped:
        return
    note = mark_killed(Path(launch.run_dir)) if launch.run_dir else None
    if note:
        launch.log.append(note)
    launch.log.append(f"stopped from the page: press Resume, or rerun the same command, to resume: {launch.command}")


def mark_killed(run_dir: Path) -> Optional[str]:
    """End the run's MLflow run as KILLED if it is still RUNNING (a run stopped before its tracker could say so).

    Returns a line for the log when something went wrong, else None."""
    from skillopt_ray.runs.rundir import RunDir

    record = RunDir(run_dir).read_mlflow_run()
    if not record or not record.get("run_id"):
        return None  # no MLflow run (tracking off, or stopped before it opened)
    uri = str(record.get("tracking_uri") or "")
    if is_http(uri) and endpoint_of(uri) != tracking_home():  # a run folder's file never sends the token anywhere
        return (
            f"note: not marking MLflow run {record['run_id']} KILLED at {uri}: not the server MLFLOW_TRACKING_URI names"
        )
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=record.get("tracking_uri"))
        if client.get_run(record["run_id"]).info.status == "RUNNING":
            client.set_terminated(record["run_id"], status="KILLED")
    except Exception as e:  # noqa: BLE001 - the stop itself worked; say why the MLflow status did not follow
        return f"note: could not mark MLflow run {record['run_id']} KILLED: {type(e).__name__}: {e}"
    return None


class Launcher:
    """The runs this dashboard started. One per server; nothing global."""

    def __init__(
        self,
        cwd: Path,
        ray_address: Optional[str] = None,
        policy: Optional[PathPolicy] = None,
        endpoints: frozenset[str] = frozenset(),
    ):
        self.cwd = Path(cwd)
        self.ray_address = ray_address
        self.policy = policy  # set for forms that arrive over HTTP (the dashboard); None: the caller's own input
        self.endpoints = endpoints  # hosts the user allowed at start-up to receive a key from a URL set on the page
        self.launches: dict[str, Launch] = {}
        self._hydra_lock = threading.Lock()
        self._jobs: Any = None

    def _job_client(self) -> Any:
        if self._jobs is None:
            from ray.job_submission import JobSubmissionClient

            self._jobs = JobSubmissionClient(self.ray_address)
        return self._jobs

    def schema(self, presets: dict[str, str]) -> dict[str, FormField]:
        """The form's fields, with placeholders from the chosen presets when an experiment is chosen."""
        schema = form_schema()
        if presets.get("experiment"):
            for name, value in preset_placeholders(presets, self._hydra_lock).items():
                schema[name]["placeholder"] = value
        return schema

    def check(self, form: JSONObject) -> tuple[list[str], PlainConfig]:
        overrides, checked = self._checked(form)
        return overrides, checked.data

    def _checked(self, form: JSONObject) -> tuple[list[str], Checked]:
        overrides = overrides_from_form(form)
        try:
            return overrides, validate(overrides, self._hydra_lock, self.policy, self.endpoints)
        except RecursionError:
            raise UsageError("an override nests too deeply for the config parser; write the value flat") from None

    def launch(self, form: JSONObject) -> Launch:
        overrides, checked = self._checked(form)
        return self._start(overrides, checked)

    def resume(self, lid: str) -> Launch:
        """The same command again for a launch that has ended: the run resumes from its last completed stage."""
        old = self.launches.get(lid)
        if old is None:
            raise KeyError(lid)
        if old.process is not None and old.process.poll() is None:
            raise UsageError(f"{lid} is still running; stop it first")
        return self._start(old.overrides, validate(old.overrides, self._hydra_lock, self.policy, self.endpoints))

    def _start(self, overrides: list[str], checked: Checked) -> Launch:
        from skillopt_ray.cli.identity import identity_record
        from skillopt_ray.cli.launch import run_dir_for

        run_dir = str(run_dir_for(checked.data, identity_record(checked.data, checked.skills)))
        lid = f"L{len(self.launches) + 1:03d}"
        launch = Launch(lid, overrides, display_command(overrides), run_dir=run_dir)
        if self.ray_address:
            launch.job_id = self._submit(launch)
        else:
            self._spawn(launch, checked)
        self.launches[lid] = launch
        return launch

    def _spawn(self, launch: Launch, checked: Checked) -> None:
        """The checked run in a process of its own, which takes it as checked (cli.handoff) on its standard input."""
        from skillopt_ray.cli import handoff

        env = {**os.environ, "PYTHONUNBUFFERED": "1", "SKILLOPT_PROGRESS": "plain"}
        if self.policy is not None and not tracking_is_home(checked.data):
            for name in MLFLOW_SECRETS:  # the token goes only to the server the user's environment names
                env.pop(name, None)
        data = copy.deepcopy(checked.data)
        data["debug"]["progress"] = "plain"  # the page follows its output line by line
        overrides = [*launch.overrides, "debug.progress=plain"]
        handed = handoff.encode(checked.with_data(data), overrides, handoff.command_argv(overrides))
        proc = self._popen(
            [sys.executable, "-m", "skillopt_ray.cli.handoff"],
            cwd=self.cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # a process that died at once says why on its output
            proc.stdin.write(handed.decode())
            proc.stdin.close()
        launch.process = proc
        threading.Thread(target=_follow, args=(launch,), name=f"log-{launch.id}", daemon=True).start()

    @staticmethod
    def _popen(argv: list[str], **kw: Any) -> subprocess.Popen:
        return subprocess.Popen(argv, **kw)

    def _submit(self, launch: Launch) -> str:
        entry = shlex.join(["python", "-m", "skillopt_ray", "ray=cluster", "debug.progress=plain", *launch.overrides])
        return str(
            self._job_client().submit_job(
                entrypoint=entry,
                runtime_env={"working_dir": str(self.cwd), "excludes": [".venv", "outputs", ".git", "**/__pycache__"]},
                metadata={"name": f"skillopt-dashboard-{launch.id}"},
            )
        )

    def stop(self, lid: str) -> Launch:
        """Interrupt the run as Ctrl-C would (it saves what it has and ends its MLflow run), escalating to SIGTERM
        and SIGKILL for its whole process group if it has not ended after a grace period."""
        launch = self.launches.get(lid)
        if launch is None:
            raise KeyError(lid)
        launch.stopped = True
        if launch.job_id:
            self._job_client().stop_job(launch.job_id)
        elif launch.process is not None and launch.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(launch.process.pid, signal.SIGINT)
            threading.Thread(target=_escalate, args=(launch.process,), name=f"stop-{lid}", daemon=True).start()
        return launch

    def stopping_run_dirs(self) -> set[str]:
        """Run directories of launches asked to stop whose process has not ended yet."""
        return {
            str(Path(one.run_dir))
            for one in self.launches.values()
            if one.run_dir and one.stopped and one.process is not None and one.process.poll() is None
        }

    def stopped_run_dirs(self) -> set[str]:
        """Run directories whose latest launch from here was stopped and has ended (shown as stopped at once)."""
        latest: dict[str, Launch] = {}
        for one in self.launches.values():
            if one.run_dir:
                latest[str(Path(one.run_dir))] = one
        return {
            d for d, one in latest.items() if one.stopped and one.process is not None and one.process.poll() is not None
        }

    def alive_run_dirs(self) -> set[str]:
        return {
            str(Path(one.run_dir))
            for one in self.launches.values()
            if one.run_dir and one.process is not None and one.process.poll() is None
        }

    def list(self) -> list[LaunchView]:
        jobs = self._job_client() if self.ray_address and any(one.job_id for one in self.launches.values()) else None
        return [one.to_dict(jobs) for one in self.launches.values()]

    def close(self) -> None:
        """Stop local runs we started that still run (they resume later from the same command), waiting for them:
        the escalation threads die with this process."""
        running = [one for one in self.launches.values() if one.process is not None and one.process.poll() is None]
        for launch in running:
            self.stop(launch.id)
        for launch in running:
            assert launch.process is not None
            _escalate(launch.process)
