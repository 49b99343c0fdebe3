"""The run state: everything a resumed run needs, as one typed, versioned record (state.json).

It is committed after every gate and every epoch-boundary stage and stays small: the records that grow
with the run (one history record per step, one evaluation per skill scored) are appended to their own
JSON-lines files instead, so a step's bookkeeping costs the same at step 1 and step 1,000.
Version 2 is the state of the
reference-faithful optimizer (scheduler counter, origins, step buffer, the evaluations behind the
current and best scores); a version-1 directory was written by an optimizer that decided
differently, so it cannot be continued faithfully and the loader says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional, TypedDict, Union, cast

from skillopt_envs.jsontypes import JSONObject

STATE_VERSION = 2


class FailurePattern(TypedDict):
    """Failed episodes of a step that share a fail-reason prefix, under the analysts' label for them."""

    pattern: str
    count: int
    task_ids: list[str]


class RejectedItem(TypedDict, total=False):
    """The part of a rejected update item the step buffer keeps (by update mode: an edit, a suggestion or a
    skill candidate)."""

    op: str
    content: str
    target: str
    type: str
    title: str
    instruction: str
    change_summary: Union[list[str], str]
    source_type: str


class BufferEntry(TypedDict, total=False):
    """One step in the step buffer (built by skillopt_ray.loop.step_buffer, kept in state.json, shown to the optimizer by
    skillopt_ray.prompts.render); a
    rejected step with items also keeps the scores and the rejected items."""

    step: int
    action: str
    n_total: int
    n_fail: int
    failure_patterns: list[FailurePattern]
    score_before: float
    score_after: float
    rejected_edits: list[RejectedItem]


class StateBrief(TypedDict, total=False):
    """The headline fields of state.json as a view reads them from any run, older and partial states included (a
    field missing or of the wrong type is left out)."""

    phase: str
    epoch: int
    global_step: int
    current_version: int
    initial_score: Optional[float]
    best_score: Optional[float]
    best_eval: str


_BRIEF_TYPES: dict[str, tuple[type, ...]] = {
    "phase": (str,),
    "epoch": (int,),
    "global_step": (int,),
    "current_version": (int,),
    "initial_score": (int, float, type(None)),
    "best_score": (int, float, type(None)),
    "best_eval": (str,),
}


def state_brief(data: object) -> StateBrief:
    """The headline fields of a state.json's content ({} for anything but an object)."""
    if not isinstance(data, dict):
        return StateBrief()
    out = {k: data[k] for k, types in _BRIEF_TYPES.items() if isinstance(data.get(k, ...), types)}
    return cast(StateBrief, {k: v for k, v in out.items() if not isinstance(v, bool)})


class StateVersionError(RuntimeError):
    """The run directory's state was written by another version of the optimizer."""


@dataclass
class Counts:
    accept: int = 0
    reject: int = 0
    skip: int = 0  # skip_no_patches, skip_no_rewrite and unchanged candidates
    dropped_analyses: int = 0  # analyst replies unusable after the re-ask
    merge_fallbacks: int = 0
    rank_fallbacks: int = 0
    dropped_epoch_calls: int = 0


@dataclass
class RunState:
    version: int = STATE_VERSION
    phase: str = "train"  # train | final | done
    epoch: int = 1
    step: int = 1  # next step within the epoch, 1-based
    global_step: int = 0  # steps completed
    lr_step: int = 0  # scheduler counter: advances only on steps that reach select, as in the reference
    next_version: int = 1
    current_version: int = 0
    best_version: int = 0
    current_score: Optional[float] = None
    best_score: Optional[float] = None
    initial_score: Optional[float] = None
    best_step: int = 0
    current_origin: str = "initial_skill"
    best_origin: str = "initial_skill"
    current_eval: str = ""  # score-cache key of the evaluation behind current_score
    best_eval: str = ""
    epoch_start_version: int = 0  # current at the start of this epoch (= end of the previous boundary)
    epoch_last_step_version: int = 0  # current after this epoch's last step, before its boundary work
    boundary_done: list[str] = field(default_factory=list)  # boundary stages applied this epoch (idempotent resume)
    meta_skill: str = ""  # active in this epoch's optimizer prompts
    step_buffer: list[BufferEntry] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)
    final_promoted: bool = False
    wall_time_s: float = 0.0

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @staticmethod
    def from_dict(d: JSONObject) -> RunState:
        version = d.get("version")
        if version != STATE_VERSION:
            raise StateVersionError(
                f"state.json has version {version}; this skillopt-ray writes version {STATE_VERSION} and its optimizer "
                "decides differently, so the run cannot be continued faithfully: start a new run (resume=false moves "
                "the old directory aside, or pick another run_name)"
            )
        known = {f.name for f in fields(RunState)}
        unknown = set(d) - known
        if unknown:
            raise StateVersionError(
                f"state.json has unknown fields {sorted(unknown)}; it was not written by this skillopt-ray"
            )
        data: Any = dict(d)  # the values' types are the fields' own, as this code wrote them
        data["counts"] = Counts(**data.get("counts", {}))
        return RunState(**data)
