"""Launch and stop runs from the dashboard's form, through the same front door as the command line.

The form becomes Hydra overrides, which are checked by the CLI's own composition and checks before anything
starts; the run is then the exact command shown on the page (`python -m skillopt_ray ...`), started as a local
process in its own session, or submitted as a Ray job when a cluster address is given. Stopping sends SIGTERM
to the process group (or stops the job); rerunning the same command resumes the run from its directory.
Keys are never part of the command: the CLI reads them from the environment as always.
"""

from __future__ import annotations

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
from typing import Any, Optional

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.dashboard.limits import PathPolicy, check_choice, refuse_from_page, refuse_unsafe_overrides

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


def form_schema(conf_dir: Optional[Path] = None) -> dict[str, Any]:
    """The form's fields: kind, choices and the value the config uses when the field is left empty.

    Only filled fields become overrides, so an experiment's or size preset's own values (a `+smoke=tiny` batch
    size, say) are not overwritten by the form's defaults."""
    from skillopt_ray.cli.compose import CONF_DIR, experiments
    from skillopt_ray.config import OptimizerConfig

    conf = Path(conf_dir or CONF_DIR)
    opt = OptimizerConfig()

    def names(group: str) -> list[str]:
        return sorted(p.stem for p in (conf / group).glob("*.yaml"))

    def field_(kind: str, placeholder: Any = "", choices: Optional[list[str]] = None, required: bool = False) -> dict:
        return {"kind": kind, "placeholder": placeholder, "choices": choices, "required": required}

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


def overrides_from_form(form: dict[str, Any]) -> list[str]:
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
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise UsageError(f"{name}={value!r}: a whole number is needed") from None
        out.append(f"{key}={value}")
    extra = str(form.get("extra") or "").strip()
    if extra:
        try:
            out += shlex.split(extra)
        except ValueError as e:
            raise UsageError(f"extra overrides: {e}") from None
    return out


def validate(overrides: list[str], lock: threading.Lock, policy: Optional[PathPolicy] = None) -> dict[str, Any]:
    """The CLI's checks before anything starts: compose with Hydra, the typed schema, the output folder, the keys
    and the skill files. Returns the resolved config; raises UsageError with the CLI's one-line message.

    With a `policy` (a form that came over HTTP), overrides that reach past plain values are refused before Hydra
    sees them, and the resolved paths are checked before any file they name is read."""
    from skillopt_ray.cli.checks import check_keys, check_output_dir, check_skill_files
    from skillopt_ray.cli.compose import compose, resolve_paths, split_price_overrides, typed

    if policy is not None:
        refuse_unsafe_overrides(overrides)
    plain, prices = split_price_overrides(overrides)
    with lock:  # Hydra's composition uses process-wide state
        cfg = compose(plain)
        if prices:
            from skillopt_ray.cli.compose import apply_prices

            apply_prices(cfg, prices)
        _obj, data = typed(cfg)
    data = resolve_paths(data)
    if policy is not None:
        refuse_from_page(data, policy)
    check_output_dir(Path(data["output_dir"]))
    check_keys(data)
    check_skill_files(data)
    return data


def command_for(overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "skillopt_ray", *overrides]


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
            return "running"
        return "stopped" if self.stopped else ("finished" if code == 0 else f"exited {code}")

    def to_dict(self, jobs: Any = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "command": self.command,
            "run_dir": self.run_dir,
            "status": self.status(jobs),
            "started": self.started,
            "job_id": self.job_id,
            "log": list(self.log)[-200:],
        }


class Launcher:
    """The runs this dashboard started. One per server; nothing global."""

    def __init__(self, cwd: Path, ray_address: Optional[str] = None, policy: Optional[PathPolicy] = None):
        self.cwd = Path(cwd)
        self.ray_address = ray_address
        self.policy = policy  # set for forms that arrive over HTTP (the dashboard); None: the caller's own input
        self.launches: dict[str, Launch] = {}
        self._hydra_lock = threading.Lock()
        self._jobs: Any = None

    def _job_client(self) -> Any:
        if self._jobs is None:
            from ray.job_submission import JobSubmissionClient

            self._jobs = JobSubmissionClient(self.ray_address)
        return self._jobs

    def check(self, form: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
        overrides = overrides_from_form(form)
        return overrides, validate(overrides, self._hydra_lock, self.policy)

    def launch(self, form: dict[str, Any]) -> Launch:
        from skillopt_ray.cli.launch import run_dir_for

        overrides, data = self.check(form)
        run_dir = str(run_dir_for(data))
        lid = f"L{len(self.launches) + 1:03d}"
        launch = Launch(lid, overrides, display_command(overrides), run_dir=run_dir)
        if self.ray_address:
            launch.job_id = self._submit(launch)
        else:
            self._spawn(launch)
        self.launches[lid] = launch
        return launch

    def _spawn(self, launch: Launch) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "SKILLOPT_PROGRESS": "plain"}
        proc = subprocess.Popen(
            [*command_for(launch.overrides), "debug.progress=plain"],
            cwd=self.cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        launch.process = proc

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                launch.log.append(line.rstrip("\n"))

        threading.Thread(target=pump, name=f"log-{launch.id}", daemon=True).start()

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
        launch = self.launches.get(lid)
        if launch is None:
            raise KeyError(lid)
        launch.stopped = True
        if launch.job_id:
            self._job_client().stop_job(launch.job_id)
        elif launch.process is not None and launch.process.poll() is None:
            try:
                os.killpg(launch.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return launch

    def alive_run_dirs(self) -> set[str]:
        return {
            str(Path(one.run_dir))
            for one in self.launches.values()
            if one.run_dir and one.process is not None and one.process.poll() is None
        }

    def list(self) -> list[dict[str, Any]]:
        jobs = self._job_client() if self.ray_address and any(one.job_id for one in self.launches.values()) else None
        return [one.to_dict(jobs) for one in self.launches.values()]

    def close(self) -> None:
        """Stop local runs we started that still run (they resume later from the same command)."""
        for launch in self.launches.values():
            if launch.process is not None and launch.process.poll() is None:
                self.stop(launch.id)
