"""The recorder: everything the loop writes down — stage records, skill versions, the best skill, step records,
the state commit — and the tracker calls that mirror them to MLflow.

A stage's record is written before the next stage starts and the state is committed after each gate and each
epoch-boundary stage; a rerun loads finished stage records (`record`: a typed record; `memo`: a list of them as
JSON) instead of recomputing them, so a resumed run ends exactly where an uninterrupted one would.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Optional, Protocol, TypeVar

from skillopt_ray.runs.records import LedgerState, StepRecord
from skillopt_ray.runs.rundir import RunDir  # noqa: E402
from skillopt_ray.runs.state import RunState


class StageRecord(Protocol):
    """A stage's typed result: written as its JSON object, read back by its class's `from_dict`."""

    def to_dict(self) -> Any: ...


R = TypeVar("R", bound=StageRecord)


class SimulatedInterrupt(RuntimeError):
    """Raised by debug.interrupt_after to test resume at an exact point."""


class Recorder:
    def __init__(self, rd: RunDir, tracker: Any, interrupt_after: Optional[str] = None):
        self.rd = rd
        self.tracker = tracker
        self.interrupt_after = interrupt_after
        self.state = RunState()
        self.history: list[StepRecord] = []  # one record per completed step
        self.ledger: LedgerState = {}  # the gateway's last ledger snapshot
        # run before each record a resume starts from (the judge's counts: Evaluator.save_judge)
        self.before_record: Callable[[], None] = lambda: None
        self._t0 = time.monotonic()
        self._wall_prior = 0.0

    # ---------------------------------------------------------------- resume
    def resume(self) -> bool:
        """Load the state and history of an earlier command on this directory; False for a new run."""
        saved = self.rd.read_state()
        if saved is None:
            return False
        self.state = saved
        self._wall_prior = saved.wall_time_s
        self.history = self.rd.history(upto=saved.global_step)
        return True

    def save(self) -> None:
        """Commit the run state (the resume point)."""
        self.state.wall_time_s = self._wall_prior + (time.monotonic() - self._t0)
        self.before_record()
        self.rd.write_state(self.state)

    # ---------------------------------------------------------------- stage records
    def checkpoint(self, label: str) -> None:
        if self.interrupt_after == label:
            raise SimulatedInterrupt(f"interrupted after {label} (debug.interrupt_after)")

    async def record(self, rel: str, label: str, read: Callable[[Any], R], compute: Callable[[], Awaitable[R]]) -> R:
        """A finished stage's typed record read back (`read`: its class's from_dict), or computed, written and
        returned as it reads back."""
        existing = self.rd.read_json(rel)
        if existing is not None:
            return read(existing)
        data = (await compute()).to_dict()
        self.before_record()
        self.rd.write_json(rel, data)
        self.checkpoint(label)
        return read(data)

    async def memo(self, rel: str, label: str, compute: Callable[[], Awaitable[Any]]) -> Any:
        """Load a finished stage's plain JSON (a list of records), or compute and persist it."""
        existing = self.rd.read_json(rel)
        if existing is not None:
            return existing
        data = await compute()
        self.rd.write_json(rel, data)
        self.checkpoint(label)
        return data

    # ---------------------------------------------------------------- skills
    def skill_text(self, version: int) -> str:
        return self.rd.read_skill(version)

    @property
    def current(self) -> str:
        return self.skill_text(self.state.current_version)

    def write_seed(self, text: str) -> None:
        """Version 0: the initial skill as given."""
        self.rd.write_skill(0, text)
        self.tracker.log_artifact(self.rd.skill_path(0), "skills")

    def new_version(self, text: str) -> int:
        st = self.state
        v = st.next_version
        self.rd.write_skill(v, text)
        st.next_version = v + 1
        self.tracker.log_artifact(self.rd.skill_path(v), "skills")
        return v

    def set_best(self, version: int, score: Optional[float], eval_key: Optional[str], step: int) -> None:
        st = self.state
        st.best_version, st.best_score, st.best_eval, st.best_step = version, score, eval_key or "", step
        st.best_origin = st.current_origin
        self.write_best(version)

    def write_best(self, version: int) -> None:
        self.rd.write_best_skill(self.skill_text(version))
        self.tracker.log_artifact(self.rd.best_skill_path)

    def log_artifact(self, rel: str, artifact_path: Optional[str] = None) -> None:
        self.tracker.log_artifact(self.rd.path(rel), artifact_path)

    # ---------------------------------------------------------------- steps
    def commit_step(self, rec: StepRecord) -> None:
        """A completed step: appended to the history before the state commit (a rerun replaces it), then its
        folder's copy, then its metrics."""
        self.history.append(rec)
        self.rd.commit_step(rec)
        self.save()
        self.rd.write_step_record(rec)
        metrics = rec.metrics()
        metrics["wall_time_s"] = self.state.wall_time_s
        self.tracker.log_metrics({**metrics, **self.ledger_metrics()}, rec.step)
        self.tracker.flush()  # the step is in MLflow before it is reported (a sweep's scheduler may stop the run next)

    def ledger_metrics(self) -> dict[str, float]:
        snap = self.ledger
        if not snap:
            return {}
        out = {"tokens_total": snap["totals"]["tokens"], "cost_usd_total": snap["totals"]["cost_usd"]}
        for k, e in snap["entries"].items():
            out[f"tokens.{k.replace('/', '.')}"] = e["prompt_tokens"] + e["completion_tokens"]
        return out

    def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None) -> None:
        self.tracker.log_metrics(metrics, self.state.global_step if step is None else step)

    def write_history(self) -> None:
        """The whole history as one file (history.json), at epoch ends and at the end of the run."""
        self.rd.write_history(self.history)
