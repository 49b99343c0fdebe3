"""Typed records of everything a run writes; `RunDir` (skillopt_ray.runs.rundir) is the only code that reads or writes them.

Records (each a dataclass with `to_dict()` / `from_dict()`):

    StepRecord        one per completed step: history.jsonl line, steps/eEE_sSSS/step_record.json, history.json item
    GateRecord        the gate's decision for a step (steps/eEE_sSSS/gate.json); one shape for the plain, the
                      early-stopped and the skipped decision (fields a decision has no value for are left out)
    SlowUpdateRecord  the epoch boundary's slow update (epochs/eEE/slow_result.json)
    MetaSkillRecord   the epoch boundary's meta-skill call (epochs/eEE/meta_skill_result.json)
    EpochRecord       an epoch boundary as read back: its slow update, meta-skill record and meta-skill text
    Evaluation        a skill's scores on a split (hard, soft, per type, per task, errors)
    ScoreEntry        one score-cache line (scores.jsonl): evaluation key -> Evaluation
    LrDecision        one autonomous learning-rate decision (lr_history.jsonl)
    Summary           the run's final summary (summary.json), training or eval-only
    SkillVersion      one skill version on disk (skills/skill_vNNNN.md)
    RunState          the resume point (state.json), in skillopt_ray.runs.state, re-exported here

Versioning: each record class has a `SCHEMA` number. Schema 1 is the layout run directories had before records
were typed, so schema-1 files carry no `schema` key (files stay as they were); a record whose layout changes
incompatibly bumps its SCHEMA and from then on writes it as the `schema` key. A file with a schema newer than this
code reads is refused with `RecordError`, one line naming the file. Keys a record does not model are kept in
`extra` and written back unchanged, so a newer writer's additions survive a round trip.

"Is this action an accept?" has one answer: `is_accept(action)`.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Optional, TypedDict, TypeVar, Union, cast

from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base.stats import GateTestDict, Interval, IntervalDict, mean_interval
from skillopt_ray.runs.payload import LrChoice
from skillopt_ray.runs.state import Counts, RunState, StateVersionError

if TYPE_CHECKING:
    from skillopt_ray.config.plain import PlainConfig

__all__ = [
    "ACCEPT",
    "ACCEPTING",
    "ACCEPT_NEW_BEST",
    "FORCE_ACCEPT",
    "REJECT",
    "SKIP_NO_PATCHES",
    "SKIP_NO_REWRITE",
    "Counts",
    "EpochRecord",
    "EvalBrief",
    "Evaluation",
    "GitState",
    "Identity",
    "Job",
    "LedgerState",
    "MlflowRun",
    "Origin",
    "Outcome",
    "Progress",
    "Provenance",
    "RunInputs",
    "Session",
    "Timing",
    "GateRecord",
    "LrDecision",
    "MetaSkillRecord",
    "RecordError",
    "RunState",
    "ScoreEntry",
    "SkillVersion",
    "SlowUpdateRecord",
    "StepRecord",
    "Summary",
    "is_accept",
]

# A step's or an epoch boundary's action, as the records spell it.
ACCEPT_NEW_BEST = "accept_new_best"
ACCEPT = "accept"
REJECT = "reject"
FORCE_ACCEPT = "force_accept"
SKIP_NO_PATCHES = "skip_no_patches"  # the analysts proposed nothing
SKIP_NO_REWRITE = "skip_no_rewrite"  # the update produced no candidate
ACCEPTING = (ACCEPT, ACCEPT_NEW_BEST, FORCE_ACCEPT)


# ---------------------------------------------------------------- the run directory's small JSON files


class Session(TypedDict):
    """One command's wall time on a run (sessions.json, oldest first)."""

    started: str  # local time, %Y-%m-%dT%H:%M:%S
    wall_s: float
    status: str  # running, then the command's end status


class Job(TypedDict):
    """One `ray job submit` submission that worked on the run (jobs.json)."""

    submission_id: str
    started: str


class MlflowRun(TypedDict, total=False):
    """The run's MLflow record (mlflow_run.json): the uid is saved before the run exists, its id once it does."""

    run_id: str
    run_uid: Optional[str]
    tracking_uri: str
    experiment_id: Optional[str]


class Origin(TypedDict, total=False):
    """Where a command came from when another tool (a sweep) runs it: that tool's command line and the overrides
    that compose this run; the provenance records them instead of this process's own."""

    argv: list[str]
    overrides: list[str]
    entry: str  # how the command is started, when this process was started otherwise (the dashboard's hand-off)


class Progress(TypedDict, total=False):
    """A live progress snapshot (DriverActor.progress(), progress.json): where the run is and what it has done.
    Every key may be missing; displays leave out what is."""

    phase: str  # starting | train | epoch_boundary | final | eval | done
    stage: str
    epoch: int
    epochs: int
    step: int
    global_step: int
    total_steps: int
    done: int  # the stage's episodes
    total: int
    run_done: int  # the run's planned episodes
    run_total: int
    accept: int
    reject: int
    skip: int
    tokens: int
    cost_usd: float
    notes: list[str]
    eta_s: Optional[float]
    written_at: float


class Timing(TypedDict):
    """A command's clock: its own wall time, the run's over every command, and how many commands ran it."""

    command_s: float
    run_total_s: float
    sessions: int


class Outcome(TypedDict, total=False):
    """How a run ended, as the driver actor returns it and the command reports it: `status` ok with the summary,
    or error with the message and the exit code."""

    status: str  # ok | error | interrupted
    exit: int
    message: Optional[str]
    notes: list[str]
    run_dir: str
    summary: JSONObject  # Summary.to_dict()
    mlflow: Optional[MlflowRun]
    elapsed_s: float
    timing: Timing


class GitState(TypedDict):
    commit: str
    branch: Optional[str]
    dirty: bool


class Provenance(TypedDict):
    """One command's provenance entry (provenance.json): what it ran, from which code, where and as whom."""

    time: str
    entry_point: str
    command_line: str
    argv: list[str]
    cwd: str
    overrides: list[str]
    config: PlainConfig  # the resolved config, secrets masked
    version: str
    git: Optional[GitState]
    code_hash: str
    python: str
    user: str
    host: str


class _RunInputsBase(TypedDict):
    skills: dict[str, str]  # config key -> content digest (or "unreadable")
    data: dict[str, str] | str  # root name -> fingerprint, or "built-in samples"
    version: str
    code: str


class RunInputs(_RunInputsBase, total=False):
    """What a run reads besides its config (identity.json's `inputs`)."""

    benchmark_code: str  # a plugin benchmark's code hash


class Identity(TypedDict):
    """The identity of a run's inputs (identity.json): a resume with other inputs is refused."""

    identity: str
    config: str
    inputs: RunInputs


class EvalBrief(TypedDict, total=False):
    """The fields a summary keeps of a test evaluation (Evaluation.brief)."""

    hard: float
    soft: float
    per_type: dict[str, dict[str, float]]
    n: int
    n_scored: int
    infra_errors: int
    data_errors: int
    repeats: int


class LedgerState(TypedDict, total=False):
    """ledger.json: every role/stage entry's fields (all numbers: skillopt_ray.llm.ledger.LedgerEntry), and their
    totals (the same fields summed, plus `tokens`)."""

    entries: dict[str, dict[str, float]]
    totals: dict[str, float]


def is_accept(action: Optional[str]) -> bool:
    """The one definition of an accepted step or slow update: accept, accept_new_best or force_accept."""
    return action in ACCEPTING


class GateDecisionFields(TypedDict):
    """A gate decision's numbers, as slow_result.json keeps them under `decision`."""

    action: str
    candidate_score: float
    current_score: float
    best_score: float


class RecordError(StateVersionError):
    """A run-directory file this skillopt-ray cannot read (corrupt, foreign, or from a newer schema)."""


R = TypeVar("R", bound="Record")
BASE_SCHEMA = 1  # the layout of run directories written before records were versioned: no schema key


@dataclass(kw_only=True)
class Record:
    """Base of the run records: dict conversion, the schema number and the keys kept as read."""

    SCHEMA: ClassVar[int] = 1
    NESTED: ClassVar[bool] = False  # a part of another record: no schema key of its own
    OMIT_NONE: ClassVar[bool] = True  # fields without a value are left out of the dict (else written as null)
    KEEP: ClassVar[frozenset[str]] = frozenset()  # fields written even when None (with OMIT_NONE)

    extra: JSONObject = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> JSONObject:
        out: JSONObject = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            if v is None and self.OMIT_NONE and f.name not in self.KEEP:
                continue
            out[f.name] = v.to_dict() if isinstance(v, Record) else v
        out.update(self.extra)
        if not self.NESTED and self.SCHEMA > BASE_SCHEMA:
            out["schema"] = self.SCHEMA
        return out

    @classmethod
    def from_dict(cls: type[R], d: Any, where: str = "") -> R:
        """The record from its dict; `where` (a file name) goes into the one-line error a bad dict raises."""
        name, at = cls.__name__, f"{where}: " if where else ""
        if not isinstance(d, dict):
            raise RecordError(f"{at}expected a {name} object, found {type(d).__name__}")
        schema = d.get("schema", BASE_SCHEMA)
        if not isinstance(schema, int) or schema > cls.SCHEMA:
            raise RecordError(
                f"{at}{name} schema {schema!r} is newer than this skillopt-ray reads ({cls.SCHEMA}); "
                "upgrade skillopt-ray to read this run"
            )
        known = {f.name: f for f in fields(cls) if f.name != "extra"}
        missing = [k for k, f in known.items() if k not in d and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise RecordError(f"{at}{name} lacks {', '.join(missing)}; the file was not written by skillopt-ray")
        kwargs = {k: cls._decode(k, d[k]) for k in known if k in d}
        extra = {k: v for k, v in d.items() if k not in known and k != "schema"}
        return cls(**kwargs, extra=extra)

    @classmethod
    def _decode(cls, name: str, value: Any) -> Any:
        """A field's value from JSON (nested records override this)."""
        return value


# ---------------------------------------------------------------- evaluations and the score cache


@dataclass(kw_only=True)
class Evaluation(Record):
    """A skill's scores on a split; `tasks` maps task id -> [hard, soft] for the episodes that were scored."""

    NESTED = True
    OMIT_NONE = False

    n: int = 0
    n_scored: int = 0
    hard: float = 0.0
    soft: float = 0.0
    infra_errors: int = 0
    infra_kinds: dict[str, int] = field(default_factory=dict)
    data_errors: int = 0
    not_played: int = 0
    per_type: dict[str, dict[str, float]] = field(default_factory=dict)
    tasks: dict[str, list[float]] = field(default_factory=dict)
    # repeated rollouts only (optimizer.rollouts_per_task > 1): episodes per task, and each task's scored
    # repeats as [hard, soft] (`tasks` then holds their means); absent from files of single-rollout runs
    repeats: Optional[int] = None
    task_repeats: Optional[dict[str, list[list[float]]]] = None
    # judged tasks only (a rubric, no rule check): each scored sample's outcome, in sample order, for the gate's
    # pairwise judge (a resumed run compares the same outcomes); absent otherwise
    outcomes: Optional[dict[str, list[str]]] = None

    def to_dict(self) -> JSONObject:
        d = super().to_dict()
        for k in ("repeats", "task_repeats", "outcomes"):
            if d.get(k) is None:
                d.pop(k, None)
        return d

    def interval(self, metric: str = "hard") -> Interval:
        """The score's 95% interval over tasks (a task's value is the mean of its repeats), with n = tasks."""
        i = 0 if metric == "hard" else 1
        return mean_interval([v[i] for v in self.tasks.values()])

    def brief(self) -> EvalBrief:
        """The fields a summary keeps of a test evaluation."""
        out = EvalBrief(
            hard=self.hard,
            soft=self.soft,
            per_type=self.per_type,
            n=self.n,
            n_scored=self.n_scored,
            infra_errors=self.infra_errors,
            data_errors=self.data_errors,
        )
        if self.repeats is not None:
            out["repeats"] = self.repeats
        return out


@dataclass(kw_only=True)
class ScoreEntry(Record):
    """One line of the score cache: the evaluation of a skill (by content hash) on a split (by signature)."""

    key: str
    eval: Evaluation

    @classmethod
    def _decode(cls, name: str, value: Any) -> Any:
        return Evaluation.from_dict(value, "scores.jsonl") if name == "eval" else value


# ---------------------------------------------------------------- a step


@dataclass(kw_only=True)
class GateRecord(Record):
    """What the gate decided for a step and why. A skipped step holds only `action`; a gate stopped early
    (a certain reject) holds `early_stopped` and `episodes_not_played` and no full-split scores."""

    action: str
    candidate_score: Optional[float] = None  # the gate score compared (like for like with the current skill)
    current_score: Optional[float] = None
    best_score: Optional[float] = None
    reason: Optional[str] = None
    flipped: Optional[dict[str, list[str]]] = None  # selection tasks that changed: to_pass, to_fail
    eval_key: Optional[str] = None  # score-cache key of the candidate's evaluation
    selection_hard: Optional[float] = None
    selection_soft: Optional[float] = None
    candidate_full_score: Optional[float] = None  # gate score over every task the candidate scored
    tasks_compared: Optional[int] = None
    candidate_scored: Optional[int] = None
    current_scored: Optional[int] = None
    gate_metric: Optional[str] = None
    early_stopped: Optional[bool] = None
    episodes_not_played: Optional[int] = None
    # optimizer.gate_test other than none: the paired test on per-task differences (skillopt_ray.base.stats.PairedTest:
    # test, alpha, n, mean_diff, lo, hi, level, p_value, significant, n_better, n_worse)
    gate_test: Optional[GateTestDict] = None

    @property
    def accepted(self) -> bool:
        return is_accept(self.action)

    @property
    def new_best(self) -> bool:
        """The accepted candidate becomes the best skill: accept_new_best, or forced above the best score."""
        if self.action == ACCEPT_NEW_BEST:
            return True
        return self.action == FORCE_ACCEPT and _above(self.candidate_score, self.best_score)


def _above(a: Optional[float], b: Optional[float]) -> bool:
    return a is not None and b is not None and a > b


APPENDIX_FIELDS = (
    "n_execution_lapse_notes",
    "n_appendix_notes_added",
    "n_appendix_notes_total",
    "n_appendix_notes_consolidated",
)
# the paired gate's numbers on a step (optimizer.gate_test other than none): written only when there was a test
PAIRED_FIELDS = ("gate_diff", "gate_diff_lo", "gate_diff_hi", "gate_p_value", "gate_episodes", "gate_looks")


@dataclass(kw_only=True)
class StepRecord(Record):
    """One completed step: what the rollout scored, what the optimizer proposed, what the gate decided, and the
    run's position after it (current/best scores and origins, skill version)."""

    OMIT_NONE = False  # a step record keeps every key, null when the step had no value for it
    # written only by runs that have them (skill-aware reflection, a paired gate)
    OMITTED_WHEN_NONE: ClassVar[tuple[str, ...]] = APPENDIX_FIELDS + PAIRED_FIELDS
    NOT_METRICS: ClassVar[frozenset[str]] = frozenset({"epoch", "step", "step_in_epoch", "best_step"})

    step: int
    epoch: int = 0
    step_in_epoch: Optional[int] = None
    action: str = ""
    rollout_hard: Optional[float] = None
    rollout_soft: Optional[float] = None
    rollout_n: Optional[int] = None
    infra_errors: int = 0
    infra_kinds: dict[str, int] = field(default_factory=dict)
    data_errors: int = 0
    n_patches: int = 0
    n_failure_patches: int = 0
    n_success_patches: int = 0
    n_edits_merged: int = 0
    n_edits_ranked: int = 0
    edit_budget: Optional[int] = None
    lr_control_mode: Optional[str] = None
    lr_decision: Optional[LrChoice] = None
    support_counts: list[Optional[int]] = field(default_factory=list)
    candidate_hash: Optional[str] = None
    candidate_skill_len: Optional[int] = None
    edit_apply_summary: dict[str, int] = field(default_factory=dict)
    rewrite_change_summary: list[str] = field(default_factory=list)
    selection_hard: Optional[float] = None
    selection_soft: Optional[float] = None
    gate_metric: Optional[str] = None
    candidate_gate_score: Optional[float] = None
    tasks_compared: Optional[int] = None
    current_score: Optional[float] = None
    best_score: Optional[float] = None
    best_step: int = 0
    current_origin: str = ""
    best_origin: str = ""
    skill_version: Optional[int] = None
    skill_len: Optional[int] = None
    n_execution_lapse_notes: Optional[int] = None
    n_appendix_notes_added: Optional[int] = None
    n_appendix_notes_total: Optional[int] = None
    n_appendix_notes_consolidated: Optional[int] = None
    gate_diff: Optional[float] = None  # the paired test's mean per-task difference, candidate minus current
    gate_diff_lo: Optional[float] = None
    gate_diff_hi: Optional[float] = None
    gate_p_value: Optional[float] = None
    gate_episodes: Optional[int] = None  # the sequential gate (optimizer.gate_test=sequential): episodes it paid
    gate_looks: Optional[int] = None  # and the looks it took at the paired evidence

    def to_dict(self) -> JSONObject:
        d = super().to_dict()
        for k in self.OMITTED_WHEN_NONE:
            if d.get(k) is None:
                d.pop(k, None)
        return d

    @property
    def accepted(self) -> bool:
        return is_accept(self.action)

    @property
    def step_id(self) -> tuple[int, int]:
        """(epoch, step within the epoch): the step's folder."""
        return self.epoch, self.step_in_epoch or self.step

    def metrics(self) -> dict[str, float]:
        """The record's numbers as tracker metrics (counters and positions left out), plus `accepted`."""
        out = {
            k: float(v)
            for k, v in self.to_dict().items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in self.NOT_METRICS and k != "schema"
        }
        out["accepted"] = 1.0 if self.accepted else 0.0
        return out


@dataclass(kw_only=True)
class LrDecision(Record):
    """One autonomous learning-rate decision (the optimizer chose the step's edit budget)."""

    step: int
    epoch: int
    learning_rate: Optional[int] = None
    reasoning: Optional[str] = None


# ---------------------------------------------------------------- an epoch boundary


@dataclass(kw_only=True)
class SlowUpdateRecord(Record):
    """The slow update at an epoch boundary: the placeholder (epoch 1), no content, or a candidate and its gate."""

    action: str
    epoch: Optional[int] = None
    reasoning: Optional[str] = None
    slow_update_content: Optional[str] = None
    error: Optional[str] = None  # the reply could not be used
    candidate_hash: Optional[str] = None
    update_origin: Optional[str] = None
    prev_hard: Optional[int] = None  # pairs the previous epoch's skill won
    curr_hard: Optional[int] = None
    eval_key: Optional[str] = None
    selection_hard: Optional[float] = None
    selection_soft: Optional[float] = None
    candidate_full_score: Optional[float] = None
    tasks_compared: Optional[int] = None
    decision: Optional[GateDecisionFields] = None
    reason: Optional[str] = None
    flipped: Optional[dict[str, list[str]]] = None
    gate_test: Optional[GateTestDict] = None  # the paired test, as in GateRecord (optimizer.gate_test)

    @property
    def accepted(self) -> bool:
        return is_accept(self.action)

    @property
    def new_best(self) -> bool:
        d = self.decision
        return d is not None and _above(d.get("candidate_score"), d.get("best_score"))


@dataclass(kw_only=True)
class MetaSkillRecord(Record):
    """The meta-skill call at an epoch boundary (skip_first_epoch, write_meta_skill or no_content)."""

    action: str
    epoch: Optional[int] = None
    reasoning: Optional[str] = None
    meta_skill_content: Optional[str] = None
    error: Optional[str] = None

    @property
    def content(self) -> str:
        """The meta skill the next epoch's optimizer prompts carry ('' unless written)."""
        return (self.meta_skill_content or "") if self.action == "write_meta_skill" else ""


@dataclass
class EpochRecord:
    """An epoch boundary as read back from its folder (a view; each part is its own file)."""

    epoch: int
    slow: Optional[SlowUpdateRecord] = None
    meta: Optional[MetaSkillRecord] = None
    meta_skill: Optional[str] = None  # the meta skill text the boundary left for the next epoch


# ---------------------------------------------------------------- the run


@dataclass
class SkillVersion:
    """One skill version on disk (skills/skill_vNNNN.md)."""

    version: int
    text: str


@dataclass(kw_only=True)
class Summary(Record):
    """The run's final summary. Training runs fill selection/test/versions/counts; an eval-only run (mode 'eval')
    fills skill_path/split/eval."""

    experiment: Optional[str] = None
    mode: Optional[str] = None  # 'eval' for an eval-only run; absent for training
    run_dir: Optional[str] = None
    seed: Optional[int] = None
    skill_path: Optional[str] = None
    split: Optional[str] = None
    eval: Optional[JSONObject] = None  # the eval-only run's scores (compare.stats summary)
    selection: Optional[dict[str, Optional[float]]] = None  # initial, best, final
    test: Optional[dict[str, EvalBrief]] = None  # initial, best, final -> Evaluation.brief()
    delta_test_hard_best_vs_initial: Optional[float] = None
    delta_test_soft_best_vs_initial: Optional[float] = None
    delta_test_hard_final_vs_initial: Optional[float] = None
    versions: Optional[dict[str, int]] = None
    best_step: Optional[int] = None
    current_origin: Optional[str] = None
    best_origin: Optional[str] = None
    final_promoted: Optional[bool] = None
    counts: Optional[dict[str, int]] = None
    actions: Optional[dict[str, int]] = None
    steps: Optional[int] = None
    tokens: Optional[dict[str, float]] = None  # the ledger's totals
    wall_time_s: Optional[float] = None
    # 95% intervals with their n (skillopt_ray.base.stats.Interval dicts): selection -> initial|best|final -> gate-score
    # interval over the selection tasks; test -> initial|best|final -> hard|soft -> interval over the test tasks
    intervals: Optional[dict[str, dict[str, Union[IntervalDict, dict[str, IntervalDict]]]]] = None
    rollouts_per_task: Optional[int] = None  # written when above 1

    def interval(self, split: str, which: str, metric: str = "hard") -> Optional[IntervalDict]:
        """A score's interval dict (mean, lo, hi, n, ...), or None for runs written before intervals existed."""
        part: object = ((self.intervals or {}).get(split) or {}).get(which)
        if split == "test" and isinstance(part, dict):
            part = part.get(metric)
        return cast(IntervalDict, part) if isinstance(part, dict) else None

    def test_score(self, which: str, metric: str = "hard") -> Optional[float]:
        """A test score of the initial, best or final skill (None for eval-only runs)."""
        brief = (self.test or {}).get(which) or EvalBrief()
        return brief.get("soft") if metric == "soft" else brief.get("hard") if metric == "hard" else None
