"""LiveMathematicianBench as the reference runs it: one multiple-choice question on research mathematics per episode.

The target gets the question and its choices (shuffled per item: the evaluation seed for every evaluation, the batch
seed in training), reasons, and puts one choice label in <answer> tags. The label is parsed in the reference's order
(label, choice text, first token) and scored by exact match: hard = soft = 1 or 0. A reply without an <answer> tag
is asked again while turns remain (env.max_turns, 1 by default as in the reference). An episode still running
exec_timeout + 60 s after it started (360 s by default) scores 0 with `task-timeout-360s`.

Splits: a data folder of normalised split files (the reference's runnable split, used as stored), or the upstream
raw files (`qa_<YYYYMM>_final.json`) split by an id manifest (the paper's split shipped in `splits/`, or
env.manifest_dir); with no data, built-in sample items in the raw format. An item with broken choices is a data error
(see data.item_defect).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.base import (
    LLM,
    Benchmark,
    DataError,
    EnvSettings,
    EpisodeContext,
    EpisodeResult,
    Task,
    parse_options,
)
from skillopt_envs.chat import ChatMessage
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import chat, data_folder, split_items
from skillopt_envs.livemathematicianbench import data as lm
from skillopt_envs.livemathematicianbench import prompts
from skillopt_envs.livemathematicianbench.data import Choice
from skillopt_envs.livemathematicianbench.scoring import has_answer_tag, scored_episode
from skillopt_envs.livemathematicianbench.shuffle import shuffle_choices

# the reference's seed skill (about 1 KB), in this project's words
SEED_SKILL = """# Skill: choosing the exact statement in research-mathematics multiple choice

## Option Comparison
- Read every option before choosing; they often differ in a single word or symbol.
- The right option is usually the strongest statement that is still justified; distractors weaken it, overstate
  it, or forget an equality case.
- Track the quantifiers in each option (for all / there exists / for some) and check they match the question.

## Theorem-Level Precision
- Weakened options drop a characterisation, turn an equivalence into one direction, or lose a constant.
- Overstated options upgrade regularity, lift a restriction, or turn an existential claim into a universal one.

## Hypotheses
- Check the assumptions and the domain each option states.
- Check equality and extremal cases, and whether a claim covers the whole family or only a subfamily.

## Final Answer
- Put only the label of the chosen option inside the answer tags.
"""

# the reference's item watchdog: an item gets max(exec_timeout, exec_timeout + SLACK) seconds from its start
TIMEOUT_SLACK_S = 60.0
# the evaluation seed (the reference's train.seed) when the engine passes none
DEFAULT_SEED = 42


# the one line for a data folder that is not there
MISSING = (
    "LiveMathematicianBench data {root} does not exist; set env.data_dir or LIVEMATH_DATA to a "
    "folder with train/ val/ test/ item files, or to the upstream qa_*_final.json files (with "
    "env.manifest_dir naming the id split)"
)


@dataclass
class LiveMathOptions:
    sample_dir: Optional[str] = None
    max_completion_tokens: int = 16384  # the completion budget each call asks for
    exec_timeout: float = 300.0  # the reference's per-call timeout; the item watchdog is this plus 60 s; <= 0: none
    shuffle_choices: bool = True
    use_theorem: bool = False  # append the item's theorem to the user message
    use_sketch: bool = False  # append the item's proof sketch to the user message

    @staticmethod
    def parse(raw: JSONObject) -> LiveMathOptions:
        opts = parse_options(LiveMathOptions, raw, "livemathematicianbench")
        if opts.max_completion_tokens < 1:
            raise DataError(f"env.options.max_completion_tokens={opts.max_completion_tokens!r}: it must be >= 1")
        return opts


def task_timeout(exec_timeout: float) -> Optional[float]:
    """The reference's per-item budget, max(exec_timeout, exec_timeout + 60); None (no watchdog) when exec_timeout <= 0."""
    if exec_timeout <= 0:
        return None
    return max(exec_timeout, exec_timeout + TIMEOUT_SLACK_S)


class LiveMathBenchmark(Benchmark):
    name = "livemathematicianbench"
    holds_env_state = False  # chat episodes: one env actor runs them all
    agent_harness = True  # llm.target.harness=codex|claude_code: one agent run per turn, task.md the user message
    options_class = LiveMathOptions

    def __init__(self, env_cfg: EnvSettings):
        super().__init__(env_cfg)
        self.options = LiveMathOptions.parse(dict(env_cfg.get("options") or {}))
        self._root, self._using_samples = data_folder(env_cfg, "LIVEMATH_DATA", MISSING, self._samples, want_dir=False)
        self._pool: Optional[dict[str, JSONObject]] = None

    def _samples(self) -> Path:
        from skillopt_envs.livemathematicianbench.samples import ensure_samples

        return ensure_samples(self.options.sample_dir)

    # ---------- data ----------

    def _manifest_dir(self) -> Optional[Path]:
        """The id split env.manifest_dir names (the samples' own for the samples); None: none was given."""
        if self.env_cfg.get("manifest_dir"):
            given = Path(os.path.expanduser(str(self.env_cfg["manifest_dir"])))
            lm.check_followable(given)
            return given.resolve()
        if self._using_samples:
            return self._root / "splits"
        return None

    def _raw_manifest_dir(self) -> Path:
        """The ids that split raw files: env.manifest_dir, else the paper's split shipped with the package."""
        return self._manifest_dir() or lm.PAPER_SPLIT_DIR

    def _split_folders(self) -> bool:
        return self._root.is_dir() and lm.has_split_folders(self._root) and not self._using_samples

    def _raw_pool(self) -> dict[str, JSONObject]:
        if self._pool is None:
            source = self._root / "data" if self._using_samples else self._root
            self._pool = {str(it["id"]): it for it in lm.load_raw_items(source)}
        return self._pool

    def _items(self, split: str) -> list[JSONObject]:
        try:
            return self._read_items(lm.split_folder(split))
        except OSError as e:  # whatever the checks above did not foresee: still one line naming the file
            where = e.filename or self._root
            raise DataError(
                f"{where} cannot be read ({e.strerror or e}); check the files under env.data_dir / LIVEMATH_DATA"
            ) from None

    def _read_items(self, folder: str) -> list[JSONObject]:
        manifests = self._manifest_dir()
        if self._split_folders():
            if manifests is not None:  # a manifest picks from the items of all the folders
                pool = {
                    str(it["id"]): it
                    for s in lm.SPLITS
                    if (p := lm.split_file(self._root / s))
                    for it in lm.read_items(p)
                }
                return self._pick(pool, manifests, folder)
            path = lm.split_file(self._root / folder)
            if path is None:
                raise DataError(
                    f"{self._root / folder} holds no *.json; a LiveMathematicianBench data folder holds train/ val/ "
                    "test/, each with a JSON list of normalised items"
                )
            return lm.read_items(path)
        if not self._using_samples and not lm.raw_files(self._root):
            raise DataError(
                f"{self._root} holds neither train/ val/ test/ item files nor qa_*_final.json files; point "
                "env.data_dir (or LIVEMATH_DATA) at the upstream data/<YYYYMM>/qa_<YYYYMM>_final.json files or at a "
                "folder of normalised split files"
            )
        return self._pick(self._raw_pool(), self._raw_manifest_dir(), folder)

    def _pick(self, pool: dict[str, JSONObject], manifests: Path, folder: str) -> list[JSONObject]:
        ids = lm.read_manifest(manifests, folder)
        missing = [i for i in ids if i not in pool]
        if missing:
            which = " (the paper's split, shipped with this project)" if manifests == lm.PAPER_SPLIT_DIR else ""
            month = missing[0].split(":", 1)[0] if ":" in missing[0] else "<YYYYMM>"
            raise DataError(
                f"{len(missing)} of {len(ids)} ids of the {folder} split in {manifests}{which} have no item in "
                f"{self._root} (first: {missing[0]}), which qa_{month}_final.json should hold; give env.data_dir every "
                "month's qa_<YYYYMM>_final.json, or set env.manifest_dir to an id split your data holds"
            )
        return [pool[i] for i in ids]

    def _where(self) -> str:
        """Where the start-up line says the items come from and which ids split them."""
        if self._split_folders() and self._manifest_dir() is None:
            return f"the split files in {self._root}"
        manifests = self._manifest_dir() if self._split_folders() else self._raw_manifest_dir()
        pool = "the split files" if self._split_folders() else f"{len(self._raw_pool())} items of the raw files"
        ids = "the paper's ids shipped in" if manifests == lm.PAPER_SPLIT_DIR else "the ids in"
        return f"{pool} in {self._root}, split by {ids} {manifests}"

    def _sizes_note(self, sizes: lm.SplitSizes) -> str:
        """The split sizes found, against what the manifest states and the paper's split."""
        paper = lm.SplitSizes(lm.PAPER_COUNTS).text()
        manifests = self._manifest_dir() if self._split_folders() else self._raw_manifest_dir()
        stated = lm.stated_counts(manifests) if manifests is not None else None
        notes = []
        if stated is not None and stated != sizes.counts:
            notes.append(f"its split_manifest.json states {lm.SplitSizes(stated).text()}")
        notes.append("as in the paper's split" if sizes.is_paper else f"the paper's split has {paper}")
        return f"{sizes.text()} train/val/test ({'; '.join(notes)})"

    def _empty_note(self, sizes: lm.SplitSizes) -> str:
        """A data folder for evaluation alone may hold only some splits: say which are empty and what still runs."""
        empty = [s for s in lm.SPLITS if not sizes.counts[s]]
        if not empty or len(empty) == len(lm.SPLITS):
            return ""
        held = [s for s in lm.SPLITS if s not in empty]
        return (
            f"; the {' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty: an evaluation of "
            f"{' or '.join(held)} runs (eval.split=all evaluates {' and '.join(held)} alone), training does not"
        )

    def _defects_note(self) -> str:
        broken = [
            d for s in lm.SPLITS if self._items(s) for t in self.load_split(s) if (d := t.payload.get("data_error"))
        ]
        if not broken:
            return ""
        return (
            f"; {len(broken)} item(s) with broken choices count as data errors, unscored, where the reference would "
            f"score them (first: {broken[0]})"
        )

    def data_note(self) -> str:
        sizes = lm.SplitSizes({s: len(self._items(s)) for s in lm.SPLITS})
        if self._using_samples:
            return (
                "LiveMathematicianBench: no data configured (env.data_dir / LIVEMATH_DATA) - using built-in sample "
                f"items (raw format, four choices) in {self._root}, {sizes.text()} train/val/test"
            )
        notes = self._empty_note(sizes) + self._defects_note()
        return f"LiveMathematicianBench: {self._where()}, {self._sizes_note(sizes)}{notes}"

    def load_split(self, split: str) -> list[Task]:
        if split == "all":  # the splits that hold items; none at all is refused by the first one's error
            held = [s for s in lm.SPLITS if self._items(s)] or [lm.SPLITS[0]]
            return [t for s in held for t in self.load_split(s)]
        items = split_items(split, self._items, "LiveMathematicianBench", self._root)
        return [Task(str(it["id"]), lm.task_type_of(it), _payload(it)) for it in items]

    def seed_skill(self) -> str:
        return SEED_SKILL

    # ---------- the episode ----------

    def presented(self, task: Task, seed: Optional[int]) -> tuple[list[Choice], Choice]:
        """The choices and correct choice as the target sees them: shuffled with `seed` (the evaluation seed when
        None), or as stored with env.options.shuffle_choices=false."""
        p = task.payload
        if not self.options.shuffle_choices:
            return [c.copy() for c in p["choices"]], p["correct_choice"].copy()
        return shuffle_choices(task.task_id, p["choices"], p["correct_choice"], DEFAULT_SEED if seed is None else seed)

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        if task.payload.get("data_error"):
            return _data_error(task)
        limit = task_timeout(self.options.exec_timeout)
        if limit is None:
            return await self._episode(task, skill, llm, ctx)
        try:
            return await asyncio.wait_for(self._episode(task, skill, llm, ctx), limit)
        except asyncio.TimeoutError:
            choices, correct = self.presented(task, ctx.seed)
            return EpisodeResult(
                task.task_id,
                task.task_type,
                fail_reason=f"task-timeout-{limit:.0f}s",
                task_description="",
                info={
                    "predicted_answer": "",
                    "correct_label": str(correct.get("label", "")),
                    "correct_text": str(correct.get("text", "")),
                    "agent_ok": False,
                },
            )

    async def _episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        p = task.payload
        choices, correct = self.presented(task, ctx.seed)
        system = prompts.system_prompt(skill)
        user = prompts.user_prompt(
            p["question"],
            choices,
            theorem=p.get("theorem", ""),
            sketch=p.get("sketch", ""),
            use_theorem=self.options.use_theorem,
            use_sketch=self.options.use_sketch,
        )
        if ctx.agent is not None:
            from skillopt_envs.livemathematicianbench.agent import agent_episode

            res = await agent_episode(task, skill, ctx.agent, ctx, user, choices, correct, self.options.exec_timeout)
            if not res.infra_error:
                res.info["choice_seed"] = ctx.seed if self.options.shuffle_choices else None
            return res
        replies = await self._chat_turns(task, llm, ctx, system, user)
        seed = ctx.seed if self.options.shuffle_choices else None
        return scored_episode(task, system, user, choices, correct, replies, choice_seed=seed)

    async def _chat_turns(self, task: Task, llm: LLM, ctx: EpisodeContext, system: str, user: str) -> list[str]:
        """The chat target's replies: a reply without an answer tag is followed by one retry prompt, up to the turn
        limit."""
        replies: list[str] = []
        message = user
        for turn in range(max(1, ctx.max_turns)):
            messages: list[ChatMessage] = [{"role": "system", "content": system}, {"role": "user", "content": message}]
            key = f"{ctx.key}/{task.task_id}/t{turn}"
            reply = await chat(llm, messages, key, self.options.max_completion_tokens, ctx.stage)
            replies.append(reply)
            if has_answer_tag(reply):
                break
            message = prompts.retry_prompt(user, reply)  # no history: the next call is [system, this message]
        return replies


def _payload(item: dict[str, Any]) -> dict[str, Any]:
    """What an episode reads of an item; an item whose choices are broken carries the line that says why."""
    payload = {
        "question": str(item["question"]),
        "choices": [dict(c) for c in item["choices"]],
        "correct_choice": dict(item["correct_choice"]),
        "theorem": str(item.get("theorem") or ""),
        "sketch": str(item.get("sketch") or ""),
    }
    defect = lm.item_defect(item)
    if defect:
        payload["data_error"] = f"{item.get(lm.LOADED_FROM, '?')}: item {item['id']}: {defect}"
    return payload


def _data_error(task: Task) -> EpisodeResult:
    """An item whose choices cannot be scored fairly: counted as a data error, never asked or scored."""
    return EpisodeResult(
        task.task_id,
        task.task_type,
        fail_reason="data_error",
        error=f"data: {task.payload['data_error']}; fix the item (or leave it out of the split)",
        info={"predicted_answer": "", "correct_label": str(task.payload["correct_choice"].get("label", ""))},
    )
