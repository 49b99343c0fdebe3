"""The shared plumbing every benchmark needs, behind one import: split names and their aliases, the data folder,
manifests, seeded splits by ratio, sample folders made once, a chat call and the agent runner.

A benchmark (built-in, a user's task file or a plugin outside the package) imports this module, `base` and `chat`,
never the engine: the model handle comes as `run_episode`'s `llm`, the agent runner as `EpisodeContext.agent`, and the
chat vocabulary it speaks to the handle (the request record, a message, the JSON reader) is re-exported here.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar

from skillopt_envs.base import (
    LLM,
    AgentInfo,
    AgentOutcome,
    AgentRunner,
    AgentTask,
    DataError,
    EnvSettings,
    EpisodeContext,
    EpisodeResult,
    Task,
    check_new_id,
    manifest_entries,
    read_json_list,
)

# the chat vocabulary a model handle takes and answers in (the request record, a message, the tolerant JSON reader)
from skillopt_envs.chat import ChatMessage, ChatRequest, extract_json

# the answer normalisers and similarity measures the built-ins score with, shared so that every benchmark means the
# same thing by "exact match", "F1" and "ANLS"
from skillopt_envs.docvqa.scoring import anls  # noqa: E402 - after the contract it builds on
from skillopt_envs.searchqa.scoring import best_f1, normalize  # noqa: E402

T = TypeVar("T")

SPLITS = ("train", "val", "test")
# every split name a run may ask for (the reference's aliases included) -> the split it means
SPLIT_ALIASES = {
    "train": "train",
    "val": "val",
    "valid_seen": "val",
    "selection": "val",
    "test": "test",
    "valid_unseen": "test",
}


def split_name(split: str, benchmark: str) -> str:
    """The canonical split (train, val, test) for a name a run asks for; DataError naming the choices otherwise."""
    try:
        return SPLIT_ALIASES[split]
    except KeyError:
        raise DataError(
            f"unknown {benchmark} split {split!r}; use train, val (valid_seen, selection), test (valid_unseen) or all"
        ) from None


def data_root(env_cfg: EnvSettings, env_var: str = "") -> Optional[Path]:
    """The benchmark's data path: env.data_dir, else the environment variable `env_var`, expanded and absolute;
    None when neither is set (the benchmark then uses its samples or refuses)."""
    raw = env_cfg.get("data_dir") or (os.environ.get(env_var, "") if env_var else "")
    if not raw:
        return None
    return Path(os.path.expandvars(os.path.expanduser(str(raw)))).resolve()


def split_items(split: str, items_of: Callable[[str], list[T]], benchmark: str, root: Path) -> list[T]:
    """A split's items from `items_of`; DataError naming the benchmark, the split's folder and `root` when there are
    none (a run on an empty split would measure nothing)."""
    items = items_of(split)
    if not items:
        raise DataError(f"the {benchmark} {split_name(split, benchmark)} split in {root} is empty")
    return items


def data_folder(
    env_cfg: EnvSettings, env_var: str, missing: str, samples: Callable[[], Path], want_dir: bool = True
) -> tuple[Path, bool]:
    """The benchmark's data folder and whether it is the generated samples: env.data_dir, else the variable `env_var`
    (followable and existing, a folder when `want_dir`; otherwise DataError `missing` with `{root}` filled in),
    else `samples()`."""
    raw = env_cfg.get("data_dir") or os.environ.get(env_var, "")
    if not raw:
        return samples(), True
    given = Path(os.path.expandvars(os.path.expanduser(str(raw))))
    check_followable(given)
    root = given.resolve()
    if not (root.is_dir() if want_dir else root.exists()):
        raise DataError(missing.format(root=root))
    return root, False


def first_json(folder: Path, pattern: str = "*.json") -> Optional[Path]:
    """The first file matching `pattern` in a split folder, by name (the reference's rule); None if there is none."""
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.glob(pattern) if p.is_file())
    return files[0] if files else None


def unfollowable(path: Path) -> str:
    """Why a name in a data folder cannot be opened though it is listed: a symlink loop or a link to nothing;
    '' when it can be followed (or does not exist at all)."""
    try:
        path.stat()
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop"
        if path.is_symlink():
            return "a symlink to nothing (its target does not exist)"
    return ""


def check_followable(path: Path) -> None:
    """DataError for a listed name that cannot be followed (the reference would fail opening it), never a skip."""
    why = unfollowable(path)
    if why:
        raise DataError(f"{path} is {why}; point it at the file or folder it should name, or remove it")


def first_data_file(folder: Path, pattern: str) -> Optional[Path]:
    """The first file matching `pattern` of a split folder by name (the reference's rule); None if there is none.
    Every listed name must be followable (check_followable)."""
    check_followable(folder)
    if not folder.is_dir():
        return None
    names = sorted(folder.glob(pattern))
    for p in names:
        check_followable(p)
    files = [p for p in names if p.is_file()]
    return files[0] if files else None


def manifest_ids(folder: Path, path: Optional[Path], split: str, entry: str, fix: str) -> list[str]:
    """The ids an id manifest lists (`path`, the split's file found in `folder`); DataError when there is none, naming
    the folder and the `entry` shape a manifest holds."""
    if path is None:
        raise DataError(
            f"no manifest for the {split} split: {folder} holds no *.json (a manifest folder holds "
            f"train/ val/ test/ items.json with {entry} entries)"
        )
    return [str(x["id"]) for x in manifest_entries(path, ("id",), fix)]


def check_choice(options: Any, key: str, choices: Sequence[str]) -> None:
    """DataError naming `env.options.<key>` and its choices when the option's value is not one of them."""
    value = getattr(options, key)
    if value not in choices:
        listed = ", ".join(choices[:-1]) + " or " + choices[-1] if len(choices) > 1 else choices[0]
        raise DataError(f"env.options.{key}={value!r}: use {listed}")


def missing_counts(presence: Sequence[Any]) -> tuple[str, str]:
    """For a data note: the listed counts per split (`a/b/c`) and what is missing (`n split, ...`) of the splits'
    presence records (each with `split`, `listed` and `present`)."""
    listed = "/".join(str(p.listed) for p in presence)
    gone = ", ".join(f"{p.listed - p.present} {p.split}" for p in presence if p.present < p.listed)
    return listed, gone


def parse_ratio(text: Any, key: str = "env.options.split_ratio") -> tuple[int, ...]:
    """`2:1:7` -> (2, 1, 7): three whole numbers >= 0 with a positive sum, or DataError naming `key`."""
    parts = str(text).replace("/", ":").split(":")
    try:
        weights = tuple(int(p) for p in parts)
    except ValueError:
        weights = ()
    if len(weights) != 3 or min(weights) < 0 or sum(weights) <= 0:
        raise DataError(f"{key}={text!r} is invalid; give three whole numbers train:val:test, e.g. 2:1:7")
    return weights


def split_counts(n: int, weights: Sequence[int]) -> list[int]:
    """How many of `n` items each share gets: the floor of each share first, then one more item to the shares with
    the largest remainders (ties: the larger weight, then the earlier share), as the reference's ratio mode counts."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), -weights[i], i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def ratio_split(items: Sequence[T], weights: Sequence[int], seed: int) -> dict[str, list[T]]:
    """Items shuffled with `random.Random(seed)`, then cut into train, val and test by `split_counts`."""
    order = list(items)
    random.Random(seed).shuffle(order)
    out: dict[str, list[T]] = {}
    start = 0
    for name, count in zip(SPLITS, split_counts(len(order), weights)):
        out[name] = order[start : start + count]
        start += count
    return out


def limited(items: list[T], limit: int) -> list[T]:
    """The first `limit` items (0: all)."""
    return items[:limit] if limit > 0 else items


def ensure_samples(root: Path, write: Callable[[Path], object], made_by: str) -> Path:
    """A sample folder made once: `write` fills a fresh temporary folder beside `root`, which then replaces `root`
    whole, so a run interrupted halfway never leaves a partial folder that looks complete. Processes that ask at
    the same time (the command's checks, the driver, env actors) take turns on a lock file beside `root`: one
    writes, the others find it complete, and none deletes a folder another is already reading."""
    root = Path(root).expanduser()
    if (root / "COMPLETE").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if (root / "COMPLETE").exists():  # made by another process while this one waited
            return root
        tmp = Path(tempfile.mkdtemp(dir=str(root.parent), prefix=f".{root.name}-"))
        try:
            write(tmp)
            (tmp / "COMPLETE").write_text(f"generated by {made_by}\n")
            if root.exists():  # a half-written folder from an interrupted run
                shutil.rmtree(root)
            tmp.rename(root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def samples_root(sample_dir: Optional[str], name: str) -> Path:
    """Where a benchmark's samples live: the given folder, else ~/.cache/skillopt_ray/<name>."""
    return Path(sample_dir).expanduser() if sample_dir else Path.home() / ".cache" / "skillopt_ray" / name


# ---------- the model and the agent, as an episode reaches them ----------


async def chat(
    llm: LLM, messages: list[ChatMessage], key: str, max_tokens: Optional[int] = None, stage: str = ""
) -> str:
    """One target chat call with the sample key `key`, booked under `stage` (the episode's, `ctx.stage`); returns the
    reply's text. Model errors propagate: the engine scores them as infrastructure failures."""
    reply = await llm.chat(ChatRequest("target", stage or "rollout", messages, key, max_tokens=max_tokens))
    return str(reply.content or "")


def agent_runner(ctx: EpisodeContext) -> Optional[AgentRunner]:
    """The agent runner the engine handed this episode (llm.target.harness=codex|claude_code), or None for a chat
    target. Its model traffic goes through the episode's model handle: cache, ledger and budgets hold as for chat."""
    return ctx.agent


@dataclass
class AgentTurns:
    """An agent episode of one run per turn: each outcome, the replies of the runs that worked, the last task."""

    outcomes: list[AgentOutcome] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    task_md: str = ""
    skill_md: str = ""

    @property
    def failed(self) -> Optional[AgentOutcome]:
        """The run that could not run (an infrastructure failure ends the turns), else None."""
        return self.outcomes[-1] if self.outcomes and not self.outcomes[-1].ok else None


async def run_agent_turns(
    agent: AgentRunner, key: str, max_turns: int, make: Callable[[str], AgentTask], done: Callable[[str], bool]
) -> AgentTurns:
    """Up to `max_turns` agent runs (at least one): `make(previous reply)` builds each turn's task (previous is ""
    on the first); the turns stop at a reply `done` accepts or at a run that failed. Turn n > 0 runs under the
    sample key `<key>/t<n>`."""
    turns = AgentTurns()
    for turn in range(max(1, max_turns)):
        at = make(turns.replies[-1] if turns.replies else "")
        out = await agent.run(at, key + (f"/t{turn}" if turn else ""))
        turns.outcomes.append(out)
        turns.task_md, turns.skill_md = at.task_md, out.skill_md
        if not out.ok:
            break
        turns.replies.append(out.reply)
        if done(out.reply):
            break
    return turns


def with_previous_attempt(task_md: str, previous: str, request: str) -> str:
    """An agent turn's task.md: the task, then (from the second turn on, when there is a previous reply) that
    attempt under its own heading and `request`, what to do differently."""
    if not previous:
        return task_md
    return f"{task_md}\n\n## Previous Attempt\n{previous}\n\n{request}"


def infra_episode(task: Task, error: str, kind: str, **fields: Any) -> EpisodeResult:
    """An episode that ended for a reason not the agent's (`kind`, one of INFRA_KINDS): counted apart, never a
    score; `fields` are the result's other fields (turns, trajectory, info, ...)."""
    return EpisodeResult(
        task.task_id,
        task.task_type,
        fail_reason="infra_error",
        infra_error=True,
        error_kind=kind,
        error=error,
        **fields,
    )


def agent_failure(task: Task, turns: AgentTurns, task_description: str = "") -> EpisodeResult:
    """The episode of agent turns whose last run could not run: an infrastructure failure, never a score; the
    analysts see SKILL.md and the last task.md as the target prompts."""
    out = turns.failed
    assert out is not None, "only turns that ended in a failed run"
    info = {"target_system_prompt": turns.skill_md, "target_user_prompt": turns.task_md}
    return infra_episode(
        task, out.error, out.error_kind, n_turns=len(turns.replies) + 1, task_description=task_description,
        info={**info, **agent_turns_info(turns.outcomes)},
    )  # fmt: skip


TURN_BREAK = "\n\n===== TURN BREAK =====\n\n"


def agent_turns_info(outcomes: Sequence[AgentOutcome], show_trace: bool = True) -> AgentInfo:
    """The episode's info over several agent runs (one per benchmark turn): summaries and traces joined with a
    turn-break line; calls, tokens, cost and time added up. Runs that failed count for nothing."""
    done = [o for o in outcomes if o.ok]
    infos = [o.info for o in done]
    if len(infos) <= 1:
        if not infos:
            return {}
        return {**infos[0], "analyst_blocks": _trace_blocks([done[0].trace], show_trace)}
    out: AgentInfo = {
        "agent_summary": TURN_BREAK.join(i["agent_summary"] for i in infos),
        "agent_attempts": sum(i["agent_attempts"] for i in infos),
        "agent_calls": sum(i["agent_calls"] for i in infos),
        "agent_cost_usd": sum(i["agent_cost_usd"] for i in infos),
        "agent_tokens": [sum(i["agent_tokens"][n] for i in infos) for n in (0, 1)],
        "agent_reported_tokens": [sum(i["agent_reported_tokens"][n] for i in infos) for n in (0, 1)],
    }
    out["agent_wall_s"] = round(sum(i["agent_wall_s"] for i in infos), 3)
    out["agent_first_call_s"] = infos[0]["agent_first_call_s"]
    out["agent_turns"] = len(infos)
    out["analyst_blocks"] = _trace_blocks([o.trace for o in done], show_trace)
    warnings = [i["usage_warning"] for i in infos if i.get("usage_warning")]
    if warnings:
        out["usage_warning"] = "; ".join(warnings)
    return out


def _trace_blocks(traces: list[str], show: bool) -> list[list[str]]:
    return [["Agent Trace Summary", TURN_BREAK.join(traces)]] if show else []


__all__ = [
    "SPLITS",
    "anls",
    "best_f1",
    "normalize",
    "SPLIT_ALIASES",
    "ChatRequest",
    "TURN_BREAK",
    "agent_failure",
    "agent_runner",
    "AgentTurns",
    "agent_turns_info",
    "run_agent_turns",
    "chat",
    "extract_json",
    "check_choice",
    "check_followable",
    "check_new_id",
    "first_data_file",
    "unfollowable",
    "with_previous_attempt",
    "data_folder",
    "data_root",
    "ensure_samples",
    "first_json",
    "infra_episode",
    "limited",
    "manifest_entries",
    "manifest_ids",
    "missing_counts",
    "parse_ratio",
    "ratio_split",
    "read_json_list",
    "samples_root",
    "split_counts",
    "split_items",
    "split_name",
]
