"""The environment interface the engine sees: load tasks, run one episode, close.

A benchmark owns its agent protocol (how the target is prompted and how replies
become actions); the engine only ever sees Task and EpisodeResult records.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol, TypedDict, TypeVar

from skillopt_envs.chat import ChatRequest, ChatResult, JsonResult, ResponseFormat
from skillopt_envs.jsontypes import JSONObject

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")  # a benchmark's options dataclass


class EnvSettings(TypedDict, total=False):
    """The run's `env` config section as a benchmark receives it (skillopt_ray/config/schema.py EnvConfig, as a dict);
    `options` are the benchmark's own, checked by its options class."""

    name: str
    benchmark: Optional[str]
    data_dir: Optional[str]
    manifest_dir: Optional[str]
    train_split: str
    selection_split: str
    test_split: str
    limit_train: int
    limit_selection: int
    limit_test: int
    max_turns: int
    history_window: int
    options: JSONObject  # the benchmark's own options (env.options), free-form


@dataclass(frozen=True)
class Task:
    task_id: str
    task_type: str
    payload: dict[str, Any] = field(default_factory=dict)


NOT_PLAYED = "not_played"


class EpisodeBase(TypedDict):
    """The fields a benchmark gives every EpisodeResult of a task, whatever its outcome (`**base`)."""

    task_description: str


@dataclass
class EpisodeResult:
    """One episode, always one per task. `infra_error` marks failures that are not the agent's."""

    task_id: str
    task_type: str
    hard: float = 0.0
    soft: float = 0.0
    fail_reason: str = ""
    n_turns: int = 0
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    error: Optional[str] = None
    infra_error: bool = False
    # For an infra error, what failed (INFRA_KINDS), so a summary can count each kind: never the model's failure
    error_kind: str = ""
    # What the optimizer's analysts see, as the reference renders it: the task text for the trajectory header,
    # and benchmark extras. Keys the engine reads from `info`: target_system_prompt, target_user_prompt,
    # analyst_blocks ([title, text] pairs: the benchmark's own sub-blocks for the analysts), predicted_answer (slow-update comparison), header_task_type
    # (overrides the "Task type:" line; SearchQA sets "" as the reference does). `trajectory` holds the
    # conversation entries in the reference's shapes: ALFWorld {step, action, reasoning, env_feedback, ...};
    # chat {role, content} ("system" = the verification block); {type: "message", content}.
    task_description: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> EpisodeResult:
        info = d.get("info") or {}
        if "spreadsheet_preview" in info and "analyst_blocks" not in info:
            # episodes cached before analyst_blocks existed named their one extra block by key
            d = {**d, "info": {**info, "analyst_blocks": [["Spreadsheet Preview", info["spreadsheet_preview"]]]}}
        return EpisodeResult(**d)

    @property
    def not_played(self) -> bool:
        """The runner cancelled the episode because its outcome could no longer change a decision."""
        return self.fail_reason == NOT_PLAYED

    @property
    def scored(self) -> bool:
        """Counts in a score: neither an infrastructure failure, broken task data, nor an episode not played."""
        return not (self.infra_error or self.data_error or self.not_played)

    @property
    def data_error(self) -> bool:
        """The task's own data is broken (a corrupt workbook, say): not the agent's failure, not infra."""
        return self.fail_reason == "data_error"

    @property
    def success(self) -> bool:
        return self.hard >= 1.0


# The kinds of infrastructure failure an episode can end with (EpisodeResult.error_kind)
INFRA_KINDS = {
    "timeout": "the episode ran past ray.episode_timeout_s (its actor was replaced)",
    "actor_died": "the environment actor (or its node) died",
    "llm": "the model endpoint failed a call after its retries",
    "llm_truncated": "a reply was cut at the completion limit (finish_reason=length)",
    "llm_filtered": "a reply was stopped by the provider's content filter",
    "sandbox_start": "the code sandbox could not start",
    "jail_export": "the agent jail could not send the agent's files back (its launcher or the host failed)",
    "formula_engine": "the formula engine could not recalculate the output workbook (env.options.recalculate)",
    "env": "the environment's own code raised an exception",
    "game_missing": "a game file of the split is missing",
    "corpus_read": "an OfficeQA corpus file (a bulletin's text or its parsed page JSON) exists but cannot be read",
}


@dataclass(frozen=True)
class EpisodeContext:
    """Per-episode settings from the engine."""

    key: str  # sample-key prefix: stage/epoch/step, keeps LLM cache entries distinct
    training: bool  # rollouts may get training-only feedback; evaluation may not
    max_turns: int
    history_window: int
    # the seed of the batch being played (training: the batch seed; evaluation: the run's seed); a benchmark that
    # randomises what the target sees per batch (LiveMathematicianBench's choice order) reads it
    seed: Optional[int] = None
    # the loop stage the episode plays in (rollout, validate, slow:rollout, meta:rollout, eval:<split>): the target's
    # calls are booked under it in the ledger; it is not part of any cache key. The engine sets it ("" only in a
    # context made by hand: the engine reads the stage off the key, a chat call books under rollout)
    stage: str = ""
    # the agent CLI for an agent target (llm.target.harness=codex|claude_code), set by the env actor that plays the
    # episode; None for a chat target
    agent: Optional[AgentRunner] = None


class LLM(Protocol):
    """The model handle an episode gets (`run_episode`'s `llm`): a chat call, a chat call whose reply is JSON checked
    against `schema`, and the response format a role's endpoint takes for `schema` (None: it takes none)."""

    async def chat(self, req: ChatRequest) -> ChatResult: ...
    async def chat_json(self, req: ChatRequest, schema: JSONObject, name: str = "reply") -> JsonResult: ...
    async def response_format_for(self, role: str, schema: JSONObject, name: str) -> Optional[ResponseFormat]: ...


@dataclass
class AgentTask:
    """One agent run an episode asks for: the SKILL.md around the skill, task.md, the prompt and the workspace."""

    skill: str
    description: str  # SKILL.md front matter: what the skill is for
    preamble: str  # SKILL.md text before the learned guidance
    task_md: str
    prompt: str
    timeout_s: float  # wall-clock limit of the run (<= 0: none; llm.target.agent.timeout_s overrides it)
    files: dict[str, str] = field(default_factory=dict)  # workspace path -> host file copied there first
    allow_file_edits: bool = False  # the agent is told it may write files (a task whose result is a file)
    # lay the workspace out in this folder and leave it there afterwards (the caller reads it, then removes it);
    # None: a temporary folder removed when the run ends
    workspace: Optional[str] = None
    # with a temporary workspace: name it after the task (predictions/<task_id>/codex_exec) as the built-ins do
    task_id: str = ""
    extra_files: dict[str, str] = field(default_factory=dict)  # workspace path -> text written there
    images: list[str] = field(default_factory=list)  # host image files shown to the agent
    link_dirs: dict[str, str] = field(default_factory=dict)  # workspace path -> host folder linked read-only
    collect: tuple[str, ...] = ()  # workspace files handed back after the run (AgentOutcome.files)


@dataclass
class AgentOutcome:
    """What an agent run gave back. `ok=False` is an infrastructure failure (the jail, the CLI or its tools broke,
    `error_kind` one of INFRA_KINDS), never a score; `info` is what the analysts see of the run."""

    reply: str  # the final message, else the raw transcript
    skill_md: str
    ok: bool = True
    error: str = ""
    error_kind: str = ""
    info: AgentInfo = field(default_factory=lambda: AgentInfo())
    files: dict[str, bytes] = field(default_factory=dict)  # the task's `collect` files the agent left
    trace: str = ""  # the run's trace summary, shown or not to the analysts by `AgentRunner.trace_to_optimizer`


class AgentInfo(TypedDict, total=False):
    """What an agent run adds to an episode's info: its final summary, attempts, model calls, tokens as the
    gateway counted them and as the CLI reported them, cost, wall time, the trace block the analysts see, and the
    run's warnings. Over several runs (one per benchmark turn) the numbers are added up and `agent_turns` counts them."""

    agent_summary: str
    agent_attempts: int
    agent_calls: int
    agent_tokens: list[int]  # [prompt, completion]
    agent_reported_tokens: list[int]
    agent_cost_usd: float
    agent_wall_s: float
    agent_first_call_s: Optional[float]
    agent_turns: int
    analyst_blocks: list[list[str]]
    usage_warning: str
    agent_jail_note: str


class AgentRunner(Protocol):
    """Runs an agent CLI (llm.target.harness) for an episode; the engine hands one over as `EpisodeContext.agent`."""

    @property
    def trace_to_optimizer(self) -> bool: ...  # whether the analysts see the agent's trace summary

    async def run(self, task: AgentTask, key: str) -> AgentOutcome: ...


class Benchmark(ABC):
    """One benchmark: its data, its seed skill and its episode loop."""

    name: str = ""
    # the typed `env.options` dataclass (with an optional `parse(raw)` adding its own range checks): lets the CLI
    # check a benchmark's options before anything starts, without making the benchmark
    options_class: ClassVar[Optional[type]] = None
    # False: a chat episode is model calls and scoring only, nothing kept in its env actor between episodes (no game,
    # no sandbox, no corpus), so one actor runs all of a run's concurrent episodes and no others are started
    holds_env_state: bool = True
    # False: its episodes want processes of their own (environment steps that hold the CPU in Python, a library that
    # is not thread-safe): `ray.mode=auto` runs it on Ray. True: the one-process engine may host its env workers
    # (each on a thread). Model-written code never runs in the engine's process either way: sandboxes and jails do.
    one_process: ClassVar[bool] = True

    @classmethod
    def check_options(cls, raw: JSONObject) -> None:
        """Raise DataError for an unknown or invalid `env.options` entry (the same parse the constructor does)."""
        oc = cls.options_class
        if oc is None:
            return
        parse = getattr(oc, "parse", None)
        parse(dict(raw)) if callable(parse) else parse_options(oc, dict(raw), cls.name)

    def preflight(self, splits: Iterable[str]) -> None:
        """Read every split the run will use, so that broken data is one line before any cluster starts."""
        for split in dict.fromkeys(splits):
            self.load_split(split)

    def __init__(self, env_cfg: EnvSettings):
        self.env_cfg = env_cfg

    @abstractmethod
    def load_split(self, split: str) -> list[Task]:
        """Tasks of a split, in a stable order. Raise DataError if the data is missing."""

    @abstractmethod
    def seed_skill(self) -> str:
        """The starting skill document."""

    @abstractmethod
    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        """Play one task with the skill in the target's prompt."""

    def warm_up(self) -> None:  # noqa: B027 - an optional hook: most benchmarks have nothing to warm up
        """Called once in each env actor when it starts: one-time costs (engine imports) are paid
        there, not by the first episodes while other episodes wait on the same actor."""

    def start_warm_up(self) -> None:
        """What an env actor calls when it starts: warm_up() now, before any episode. A benchmark whose episodes can
        send their first model call before the warm-up ends runs it in the background instead, and waits for it
        where an episode first needs what it prepares."""
        self.warm_up()

    def data_note(self) -> str:
        """One start-up line saying where the data comes from."""
        return ""

    def turns_note(self, splits: dict[str, list[Task]], max_turns: int) -> str:
        """One start-up line when `max_turns` leaves tasks of these splits that no target could win (a benchmark
        that knows a task's shortest solution says so); empty when every task can be won."""
        return ""

    def close(self) -> None:  # noqa: B027 - an optional hook: most benchmarks hold nothing to release
        """Called when the env actor stops."""


def parse_options(cls: type[T], raw: JSONObject, env_name: str) -> T:
    """A benchmark's typed `env.options` dataclass from the config dict; unknown keys are a clear error."""
    from dataclasses import fields

    allowed = {f.name for f in fields(cls)}
    unknown = set(raw) - allowed
    if unknown:
        raise DataError(
            f"unknown env.options key(s) for {env_name}: {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}"
        )
    return cls(**raw)


class DataError(ValueError):
    """Missing or malformed benchmark data; the message names the path and the fix."""


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (a Python str was a JSON string)."""
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
    return names.get(type(value), "null" if value is None else type(value).__name__)


def read_json_list(path: Path, fix: str) -> list[Any]:
    """A JSON file holding a list, or DataError naming the file, what is wrong with it (with the line) and `fix`."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror}); {fix}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text (byte {e.start} cannot be decoded); {fix}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        cut = e.msg.startswith("Unterminated") or e.pos >= len(text.rstrip())
        what = "ends before its JSON is complete (a truncated file?)" if cut else "is not valid JSON"
        raise DataError(f"{path} {what}: {e.msg} at line {e.lineno} column {e.colno}; {fix}") from None
    if not isinstance(data, list):
        raise DataError(f"{path} must hold a JSON list, found a JSON {json_type(data)}; {fix}")
    return data


def manifest_entries(path: Path, required: tuple[str, ...], fix: str) -> list[JSONObject]:
    """A split manifest: a JSON list of objects, each with the `required` keys, no id listed twice (the reference's
    materialisers refuse repeated ids; a repeated id would be played and counted twice)."""
    items = read_json_list(path, fix)
    seen: dict[str, int] = {}
    for n, it in enumerate(items):
        if not isinstance(it, dict):
            want = " and ".join(("an " if k[0] in "aeiou" else "a ") + k for k in required)
            raise DataError(
                f"{path}: entry {n} ({str(it)[:60]}) is a JSON {json_type(it)}, is not an object with {want}; {fix}"
            )
        lacking = [
            k for k in required if it.get(k) in (None, "") or not isinstance(it[k], (str, int) if k == "id" else str)
        ]
        if lacking:
            raise DataError(f"{path}: entry {n} ({str(it)[:80]}) lacks a text {', '.join(lacking)}; {fix}")
        if "id" in it:
            check_new_id(path, seen, it["id"], n)
    return items


def check_new_id(path: Path, seen: dict[str, int], item_id: Any, n: int) -> None:
    """Record `item_id` as entry `n` of `path`; DataError if an earlier entry had it."""
    key = str(item_id)
    if key in seen:
        raise DataError(
            f"{path}: id {key!r} is listed twice (entries {seen[key]} and {n}); each task may appear once: "
            "remove the repeated entry"
        )
    seen[key] = n
