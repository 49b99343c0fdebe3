"""Your own tasks, no code: `+experiment=custom env.data_dir=<tasks.jsonl | folder>`.

Chat tasks (a JSONL file, or a folder with train/val/test.jsonl): the target gets the skill and the task's system
text as its system message and the prompt (with the choices, for `mcq`) as the user message; the reply is scored by
`env.options.scorer` (scorers.py) or by a check script run in the sandbox (`scorer=script`, check.py). Agent tasks (a
folder of task folders, each with task.md, optional workspace/ and a check): with llm.target.harness=codex|claude_code
the agent works in a copy of the workspace; the reply (an agent's final message) is written to reply.txt there. Then the check
scores the workspace. hard = score >= env.options.hard_at, soft = score; a broken check is a data error for the task.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union, cast

from skillopt_envs.base import (
    LLM,
    AgentInfo,
    AgentTask,
    Benchmark,
    DataError,
    EnvSettings,
    EpisodeContext,
    EpisodeResult,
    Task,
    parse_options,
)
from skillopt_envs.chat import ChatMessage
from skillopt_envs.custom import check as checks
from skillopt_envs.custom.scorers import (
    GRADED,
    SCORERS,
    ScoreInput,
    Unscorable,
    check_patterns,
    choice_labels,
    extract_answer,
    unscorable_answer,
)
from skillopt_envs.custom.tasks import UserTask, read_source, task_check
from skillopt_envs.jsontypes import JSONObject, as_object
from skillopt_envs.kit import SPLITS, agent_runner, chat, data_root, parse_ratio, ratio_split, split_name

SEED_SKILL = """# Skill

No rules yet: training adds what it learns about these tasks here.
"""
ROLE = "You are a careful assistant completing one task."
ANSWER_FORMAT = (
    "## Answer Format\nThink it through first, then give your final answer inside <answer></answer> tags, "
    "with nothing else inside the tags."
)
AGENT_DESCRIPTION = "Complete the task in task.md"
AGENT_PREAMBLE = "Use this skill for the current task. Read task.md and do what it asks."
AGENT_PROMPT = "Use the `skillopt-target` skill in this workspace.\nRead task.md and complete the task it describes."
SCRIPT = "script"


@dataclass
class CustomOptions:
    scorer: str = "exact_match"  # exact_match | contains | f1 | anls | mcq | numeric | regex | script
    check: Optional[str] = None  # the check script: scorer=script, or the shared check of agent tasks
    split_ratio: Union[str, list[int]] = "2:1:7"  # train:val:test for tasks without a split
    split_seed: int = 42
    tolerance: float = 1e-6  # numeric: relative tolerance
    hard_at: float = 0.999  # a task counts as solved (hard = 1) at this score
    check_timeout_s: float = 60.0  # wall clock (and CPU seconds) of one check run
    agent_timeout_s: float = 600.0  # wall clock of one agent run (llm.target.agent.timeout_s overrides it)
    sandbox: str = "bwrap"  # bwrap | none (none: checks run without isolation, unsafe)
    max_tokens: Optional[int] = None  # the target's completion budget per reply (None: llm.target's)
    metadata_type_key: str = "task_type"  # metadata field naming a task's type (per-type scores); absent: custom
    exclude: list[str] = field(default_factory=list)  # task ids (an agent task's folder name) left out of every split

    @staticmethod
    def parse(raw: JSONObject) -> CustomOptions:
        o = parse_options(CustomOptions, raw, "custom")
        _check_types(o)
        if o.scorer not in (*SCORERS, SCRIPT):
            raise DataError(f"env.options.scorer={o.scorer!r} is invalid; use one of {', '.join([*SCORERS, SCRIPT])}")
        if o.scorer == SCRIPT and not o.check:
            raise DataError("env.options.scorer=script needs env.options.check=<path to the check script>")
        if o.sandbox not in ("bwrap", "none"):
            raise DataError(f"env.options.sandbox={o.sandbox!r} is invalid; use bwrap or none")
        if not 0.0 < o.hard_at <= 1.0 or o.tolerance < 0 or o.check_timeout_s <= 0:
            raise DataError("env.options: hard_at must be in (0, 1], tolerance >= 0 and check_timeout_s > 0")
        if not isinstance(o.exclude, list) or not all(isinstance(t, str) for t in o.exclude):
            raise DataError(f"env.options.exclude={o.exclude!r} is not a list of task ids; give e.g. [h-1a2b,h-3c4d]")
        ratio = o.split_ratio if isinstance(o.split_ratio, str) else ":".join(map(str, o.split_ratio))
        parse_ratio(ratio)
        o.split_ratio = ratio
        return o


_NUMBERS = ("tolerance", "hard_at", "check_timeout_s", "agent_timeout_s")
_WHOLE = ("split_seed", "max_tokens")
_TEXT = ("scorer", "check", "sandbox", "metadata_type_key")


def _check_types(o: CustomOptions) -> None:
    """Each option of the type it is read as: a wrong one from the command line is named here, not met later as a
    TypeError deep in a comparison."""
    for name in _NUMBERS + _WHOLE + _TEXT:
        value = getattr(o, name)
        if value is None and name in ("check", "max_tokens"):
            continue
        if name in _TEXT:
            ok, kind = isinstance(value, str), "a string"
        else:
            ok = isinstance(value, int if name in _WHOLE else (int, float)) and not isinstance(value, bool)
            kind = "a whole number" if name in _WHOLE else "a number"
        if not ok:
            raise DataError(
                f"env.options.{name}={value!r} is not {kind}; give e.g. env.options.{name}={_EXAMPLE[name]}"
            )


_EXAMPLE = {"tolerance": "1e-6", "hard_at": "0.999", "check_timeout_s": "60", "agent_timeout_s": "600",
            "split_seed": "42", "max_tokens": "2048", "scorer": "exact_match", "check": "check.py",
            "sandbox": "bwrap", "metadata_type_key": "task_type"}  # fmt: skip


class CustomBenchmark(Benchmark):
    name = "custom"
    agent_harness = True
    options_class = CustomOptions
    requires_data_dir = True  # no samples: the run is about the user's own tasks

    def __init__(self, env_cfg: EnvSettings):
        super().__init__(env_cfg)
        self.options = CustomOptions.parse(dict(env_cfg.get("options") or {}))
        root = data_root(env_cfg)
        if root is None:
            raise DataError("env=custom needs env.data_dir=<tasks.jsonl | folder of tasks>")
        self.root = root
        self.check = Path(self.options.check).expanduser().resolve() if self.options.check else None
        # chat tasks scored in-process keep nothing between episodes; sandboxed checks and agent task folders do
        self.holds_env_state = self.options.scorer == SCRIPT or not (root.is_file() or any(root.glob("*.jsonl")))
        self._splits: Optional[dict[str, list[UserTask]]] = None
        self._sandbox: Optional[checks.Sandbox] = None

    # ---------- data ----------

    def _all_splits(self) -> dict[str, list[UserTask]]:
        if self._splits is None:
            kind, found = read_source(self.root, self.check, frozenset(self.options.exclude))
            self._splits = found if isinstance(found, dict) else self._by_ratio(found)
            self._validate(kind, [t for s in SPLITS for t in self._splits[s]])
        return self._splits

    def _by_ratio(self, tasks: list[UserTask]) -> dict[str, list[UserTask]]:
        """Tasks that name their split keep it; the others are shuffled with split_seed and cut by split_ratio."""
        free = [t for t in tasks if t.split is None]
        cut = ratio_split(free, parse_ratio(self.options.split_ratio), self.options.split_seed)
        return {s: [t for t in tasks if t.split == s] + cut[s] for s in SPLITS}

    def _validate(self, kind: str, tasks: list[UserTask]) -> None:
        """Ids unique over the splits; each task has what its scorer reads; the check exists and can run."""
        seen: set[str] = set()
        for t in tasks:
            if t.id in seen:
                raise DataError(f"{self.root}: task id {t.id!r} is used twice; ids must be unique across the splits")
            seen.add(t.id)
            self._validate_task(kind, t)
        if self.check is not None:
            checks.check_file(self.check, "env.options.check")

    def _validate_task(self, kind: str, t: UserTask) -> None:
        where = f"{self.root}: task {t.id!r}"
        if kind == "agent":
            checks.check_file(task_check(t, self.check) or Path(t.folder or "") / "check", where)
            return
        scorer = self.options.scorer
        if scorer != SCRIPT and not t.golds:
            raise DataError(f"{where} has no answer, which scorer={scorer} compares with; add one or use scorer=script")
        if scorer == "mcq" and not t.raw.get("choices"):
            raise DataError(f"{where} has no choices, which scorer=mcq needs")
        if scorer == "regex":
            try:
                check_patterns(t.golds, where)
            except ValueError as e:
                raise DataError(str(e)) from None
        unmet = unscorable_answer(scorer, t.golds, t.raw)
        if unmet:
            raise DataError(f"{t.where or where}: task {t.id!r}: {unmet}; fix the answer or use another scorer")

    def load_split(self, split: str) -> list[Task]:
        if split == "all":  # every task: a file of test tasks alone is a whole evaluation (its empty train is not)
            tasks = [t for s in SPLITS for t in self._all_splits()[s]]
        else:
            tasks = self._all_splits()[split_name(split, "custom")]
        if not tasks:
            raise DataError(
                f"the {split} split of {self.root} is empty; add tasks, give them a split, or change "
                f"env.options.split_ratio (now {self.options.split_ratio})"
            )
        return [Task(t.id, self._task_type(t), {"task": t.raw, "golds": t.golds, "folder": t.folder}) for t in tasks]

    def _task_type(self, t: UserTask) -> str:
        value = as_object(t.raw.get("metadata")).get(self.options.metadata_type_key)
        return str(value) if isinstance(value, (str, int)) and str(value).strip() else "custom"

    def seed_skill(self) -> str:
        return SEED_SKILL

    def data_note(self) -> str:
        s = self._all_splits()
        counts = "/".join(str(len(s[k])) for k in SPLITS)
        how = "script " + str(self.check) if self.options.scorer == SCRIPT else self.options.scorer
        if any(t.folder for k in SPLITS for t in s[k]):
            how = "each task's check" + (f" (else {self.check})" if self.check else "")
        return f"custom: tasks from {self.root}, {counts} train/val/test, scored by {how}"

    # ---------- the episode ----------

    def _user_task(self, task: Task) -> UserTask:
        p = task.payload
        return UserTask(task.task_id, p["task"]["prompt"], list(p["golds"]), None, p["task"], p["folder"])

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        t = self._user_task(task)
        if t.folder:
            return await self._agent_task_episode(task, t, skill, llm, ctx)
        system, user = self._system(skill, t), self._user(t)
        runner = agent_runner(ctx)
        info: AgentInfo = {}
        if runner is None:
            messages: list[ChatMessage] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            reply = await chat(llm, messages, f"{ctx.key}/{task.task_id}/t0", self.options.max_tokens, ctx.stage)
        else:
            tags = self.options.scorer not in (SCRIPT, "contains")  # the scorers that take the tagged answer
            prompt = AGENT_PROMPT + ("\nEnd with your final answer inside <answer></answer> tags." if tags else "")
            at = AgentTask(skill, AGENT_DESCRIPTION, AGENT_PREAMBLE, user, prompt, self.options.agent_timeout_s)
            out = await runner.run(at, f"{ctx.key}/{task.task_id}")
            if not out.ok:
                return _infra(task, out.error, out.error_kind)
            reply, system, info = out.reply, out.skill_md, out.info
        return await self._scored(task, t, reply, system, user, info)

    def _system(self, skill: str, t: UserTask) -> str:
        parts = [ROLE]
        if skill.strip():
            parts.append(f"## Skill\n{skill.strip()}")
        if t.raw.get("system"):
            parts.append(str(t.raw["system"]))
        if self.options.scorer not in (SCRIPT, "contains") and not t.folder:  # a task folder's check reads it all
            parts.append(ANSWER_FORMAT)
        return "\n\n".join(parts)

    def _user(self, t: UserTask) -> str:
        if self.options.scorer != "mcq" and not t.raw.get("choices"):
            return t.prompt
        listed = "\n".join(f"{k}. {v}" for k, v in choice_labels(t.raw.get("choices")).items())
        return f"{t.prompt}\n\n## Choices\n{listed}\n\nAnswer with the label of one choice."

    async def _scored(
        self, task: Task, t: UserTask, reply: str, system: str, user: str, info: AgentInfo
    ) -> EpisodeResult:
        answer = extract_answer(reply)
        if self.options.scorer == SCRIPT:
            assert self.check is not None  # parse() refuses scorer=script without a check
            out = await asyncio.to_thread(checks.run_check, self._get_sandbox(), self.check, t.raw, reply, None)
            return self._check_result(task, t, reply, answer, out, system, user, info)
        inp = ScoreInput(reply, answer, t.golds, t.raw, self.options.tolerance)
        scorer = SCORERS[self.options.scorer]
        try:  # a regex match may run up to its time limit: off the event loop the other episodes share
            s = await asyncio.to_thread(scorer, inp) if self.options.scorer == "regex" else scorer(inp)
        except Unscorable as e:
            r = self._result(task, t, reply, answer, 0.0, str(e), system, user, info)
            r.fail_reason, r.error = "data_error", f"data: {e}"
            return r
        return self._result(task, t, reply, answer, s.value, s.reason, system, user, info)

    def _get_sandbox(self) -> checks.Sandbox:
        if self._sandbox is None:
            self._sandbox = checks.make_sandbox(self.options.sandbox, self.options.check_timeout_s)
        return self._sandbox

    def _check_result(
        self, task: Task, t: UserTask, reply: str, answer: str, out: checks.CheckOutcome, *shown: Any
    ) -> EpisodeResult:
        """A check's verdict as the episode's result: a score, a data error (broken check) or an infra error."""
        if out.infra:
            return _infra(task, out.reason, "sandbox_start")
        system, user, info = shown
        info = cast(AgentInfo, {**info, **_judge_info(t, reply, out.value is None)})  # a rubric task's material too
        if out.value is None:
            r = self._result(task, t, reply, answer, 0.0, out.reason, system, user, info, check=out)
            r.fail_reason, r.error = "data_error", f"data: {out.reason}"
            return r
        return self._result(task, t, reply, answer, out.value, out.reason, system, user, info, check=out)

    def _result(
        self,
        task: Task,
        t: UserTask,
        reply: str,
        answer: str,
        value: float,
        reason: str,
        system: str,
        user: str,
        info: AgentInfo,
        check: Optional[checks.CheckOutcome] = None,
    ) -> EpisodeResult:
        """The scored episode with what the analysts read: the prompt, the reply, the expected answer and the
        scorer's reason (with a check script: what the check read and what it printed)."""
        hard = value >= self.options.hard_at
        scorer = SCRIPT if t.folder else self.options.scorer
        if check is None:
            expected = repr(t.golds) if t.golds else "(what the check accepts)"
            verdict = (
                f"[EVALUATION RESULT]\nScorer: {scorer}\nAnswer taken from the reply: {answer!r}\n"
                f"Expected: {expected}\nScore: {value:.4f} ({'solved' if hard else 'not solved'})\nReason: {reason}"
            )
            first = reason.splitlines()[0]
        else:
            verdict, first = _check_verdict(t, value, hard, check), _first_finding(check)
            answer = answer if t.folder else reply.strip()  # a reply's check read all of it, not one answer
        return EpisodeResult(
            task.task_id,
            task.task_type,
            hard=float(hard),
            soft=value if (scorer in GRADED or scorer == SCRIPT) else float(hard),
            fail_reason="" if hard else f"{scorer}={value:.3f}: {first[:300]}",
            n_turns=1,
            trajectory=[
                {"role": "user", "content": user},
                {"type": "message", "turn": 1, "content": reply},
                {"role": "system", "content": verdict},
            ],
            task_description=t.prompt,
            info={
                "target_system_prompt": system,
                "target_user_prompt": user,
                "predicted_answer": answer,
                "gold_answers": t.golds,
                "score": value,
                "scorer": scorer,
                **info,
            },
        )

    async def _agent_task_episode(
        self, task: Task, t: UserTask, skill: str, llm: LLM, ctx: EpisodeContext
    ) -> EpisodeResult:
        """An agent task: the agent (or a chat reply in reply.txt) works in a copy of the task's workspace, then the
        task's check scores that workspace."""
        folder = Path(str(t.folder))
        tmp = Path(tempfile.mkdtemp(prefix="skillopt-custom-"))
        ws = tmp / "workspace"
        try:
            runner = agent_runner(ctx)
            if runner is None:
                system, user = self._system(skill, t), t.prompt
                messages: list[ChatMessage] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
                reply = await chat(llm, messages, f"{ctx.key}/{task.task_id}/t0", self.options.max_tokens, ctx.stage)
                _copy_workspace(folder / "workspace", ws)
                (ws / "reply.txt").write_text(reply, encoding="utf-8")
                info: AgentInfo = {}
            else:
                files = _workspace_files(folder / "workspace")
                at = AgentTask(skill, AGENT_DESCRIPTION, AGENT_PREAMBLE, t.prompt, AGENT_PROMPT,
                               self.options.agent_timeout_s, files, allow_file_edits=True, workspace=str(ws))  # fmt: skip
                out = await runner.run(at, f"{ctx.key}/{task.task_id}")
                if not out.ok:
                    return _infra(task, out.error, out.error_kind)
                reply, system, user, info = out.reply, out.skill_md, t.prompt, out.info
                if not (ws / "reply.txt").exists():  # the agent's final message, for checks that read the answer
                    (ws / "reply.txt").write_text(reply, encoding="utf-8")
            check = task_check(t, self.check)
            assert check is not None  # the task's folder was checked when it was read
            res = await asyncio.to_thread(checks.run_check, self._get_sandbox(), check, t.raw, None, ws)
            return self._check_result(task, t, reply, extract_answer(reply), res, system, user, info)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _judge_info(t: UserTask, reply: str, unscored: bool) -> JSONObject:
    """For a task whose metadata holds a rubric: what the runner's judge reads (the request, the rubric, the reply),
    and whether the check gave no score (then only the judge can score it; until it does, a data error)."""
    rubric = as_object(t.raw.get("metadata")).get("rubric")
    if not isinstance(rubric, str) or not rubric.strip():
        return {}
    return {"judge": {"prompt": t.prompt, "rubric": rubric.strip(), "outcome": reply, "unscored": unscored}}


def _check_verdict(t: UserTask, value: float, hard: bool, out: checks.CheckOutcome) -> str:
    """What a check script's analysts read: what the check was given (never an answer it did not read), the score,
    and the check's own output (its FAIL lines) before anything else."""
    read = (
        "the task's workspace as the agent left it (the reply, or the agent's final message, is in its reply.txt)"
        if t.folder
        else "the whole reply above (as reply.txt); no answer was extracted from it"
    )
    expected = f"\nExpected answer(s) in the task file: {t.golds!r}" if t.golds else ""
    return (
        f"[EVALUATION RESULT]\nScorer: script\nThe check read: {read}{expected}\n"
        f"Score: {value:.4f} ({'solved' if hard else 'not solved'})\n"
        f"What the check printed:\n{out.output}\nVerdict: {out.reason}"
    )


def _first_finding(out: checks.CheckOutcome) -> str:
    """The check's first FAIL line, else its first line of output that is not its score; else its verdict: the
    one line the failure-reason header and the step buffer's patterns show."""
    lines = [ln.strip() for ln in out.output.splitlines()]
    said = [ln for ln in lines if ln and not ln.startswith(("[stdout]", "[stderr]")) and not _is_number(ln)]
    failed = [ln for ln in said if ln.upper().startswith("FAIL")]
    return (failed or said or [out.reason])[0]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _workspace_files(folder: Path) -> dict[str, str]:
    """Every regular file under an agent task's workspace/, by its path inside it. Links (to files or folders) are
    left out: a link to /etc/passwd or to a file beside the task must not carry that file into the workspace."""
    if folder.is_symlink() or not folder.is_dir():
        return {}
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if not path.is_symlink() and path.is_file():
                found[str(path.relative_to(folder))] = str(path)
    return found


def _copy_workspace(src: Path, dst: Path) -> None:
    """The workspace's regular files copied into `dst` (links left out, as for an agent)."""
    dst.mkdir(parents=True)
    for rel, path in _workspace_files(src).items():
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dst / rel, follow_symlinks=False)


def _infra(task: Task, error: str, kind: str) -> EpisodeResult:
    """The agent or the sandbox could not run: an infrastructure failure, never a score."""
    return EpisodeResult(
        task.task_id, task.task_type, fail_reason="infra_error", infra_error=True, error_kind=kind or "env",
        error=error, n_turns=1,
    )  # fmt: skip
