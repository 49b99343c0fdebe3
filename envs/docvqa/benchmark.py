"""DocVQA as the reference runs it: one page image and one question per episode, scored by ANLS.

The target gets one multimodal user message (the question, then the page as a `data:` URL image) under a
system prompt holding the skill. A reply without <answer> tags is asked again, while turns remain
(env.max_turns, 1 by default as in the reference). The last tag wins; an unclosed one falls back to the
last non-empty line. hard = ANLS >= 0.999, soft = ANLS.

Images stay with the env actors: a task carries its page's path, and the actor running the episode reads
the file when it builds the request. A target that sees no images (the embedded model) gets the page's text
layer instead (env.options.page_input; `auto` picks it for the embedded provider).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

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
from skillopt_envs.chat import ChatMessage, ContentPart
from skillopt_envs.docvqa import data as dv
from skillopt_envs.docvqa import prompts, upstream
from skillopt_envs.docvqa.scoring import has_answer_tag, scored_episode
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import chat, check_choice, data_folder, split_items

if TYPE_CHECKING:  # only annotations name the agent runner
    from skillopt_envs.base import AgentRunner

# the reference's seed skill, in this project's words: visual evidence and exact-answer discipline
SEED_SKILL = """# Skill: answering questions about document pages

## Visual Evidence Discipline
- Read the page carefully before answering: find the region (field, cell, line) the question points to.
- Answer with the smallest exact span that answers the question.
- When strings look alike, decide between them by their labels and where they sit on the page.

## Exact Answer Discipline
- Copy names, numbers and dates exactly as printed.
- Extract the answer from the page instead of paraphrasing it.
- Before committing, compare the answer with the nearby alternatives.
"""

PAGE_INPUTS = ("auto", "image", "text")
# the reference's item watchdog: an item gets max(exec_timeout, exec_timeout + SLACK) seconds from its start
TIMEOUT_SLACK_S = 60.0


# the one line for a data folder that is not there
MISSING = (
    "DocVQA data directory {root} does not exist; set env.data_dir or DOCVQA_DATA to a folder "
    "with train/ val/ test/ CSVs (python -m skillopt_envs.docvqa.materialize writes one)"
)


@dataclass
class DocVQAOptions:
    sample_dir: Optional[str] = None
    # relative image paths in the CSVs start here (the reference: the process's working directory); default: data_dir
    image_root: Optional[str] = None
    image_detail: str = "auto"  # sent as image_url.detail unless auto (or empty)
    max_completion_tokens: int = 16384  # the completion budget each call asks for
    exec_timeout: float = 120.0  # the reference's per-call timeout; the item watchdog is this plus 60 s
    # image: the page image (the reference); text: the page's text layer (<image>.txt) instead, for a target that
    # sees no images; auto: text for the embedded provider, image otherwise
    page_input: str = "auto"
    target_provider: str = ""  # filled from llm.target.provider by conf/env/docvqa.yaml, read by page_input=auto
    check_images: bool = True  # load_split checks that every page image exists
    # where env actors write out pages read from parquet files (a local disk on each node); default under ~/.cache
    page_cache: Optional[str] = None

    @staticmethod
    def parse(raw: JSONObject) -> DocVQAOptions:
        opts = parse_options(DocVQAOptions, raw, "docvqa")
        check_choice(opts, "page_input", PAGE_INPUTS)
        if opts.max_completion_tokens < 1:
            raise DataError(f"env.options.max_completion_tokens={opts.max_completion_tokens!r}: it must be >= 1")
        return opts

    @property
    def sends_images(self) -> bool:
        if self.page_input == "auto":
            return self.target_provider != "embedded"
        return self.page_input == "image"


def task_timeout(exec_timeout: float) -> float:
    """The reference's per-item budget: max(exec_timeout, exec_timeout + 60)."""
    return max(exec_timeout, exec_timeout + TIMEOUT_SLACK_S)


class DocVQABenchmark(Benchmark):
    name = "docvqa"
    holds_env_state = False  # chat episodes: one env actor runs them all
    agent_harness = True  # llm.target.harness=codex|claude_code: one agent run per turn, the page image attached
    options_class = DocVQAOptions

    def __init__(self, env_cfg: EnvSettings):
        super().__init__(env_cfg)
        self.options = DocVQAOptions.parse(dict(env_cfg.get("options") or {}))
        self._root, self._using_samples = data_folder(env_cfg, "DOCVQA_DATA", MISSING, self._samples)
        raw = not self._using_samples
        root = self.options.image_root
        if root:
            dv.check_followable(Path(os.path.expanduser(root)))
        self._image_root = Path(os.path.expanduser(root)).resolve() if root else self._root
        # the public data read in place (parquet / JSON) when the folder holds no split CSVs
        self._sources: Optional[upstream.Sources] = None
        self._pool: Optional[dict[str, dv.DocVQAItem]] = None
        self._manifest = Path(os.path.expanduser(str(env_cfg["manifest_dir"]))) if env_cfg.get("manifest_dir") else None
        if raw and not any(dv.split_csv(self._root / s) for s in dv.SPLITS):
            sources = upstream.find_sources(self._root)
            if sources:
                if self._manifest is None:  # the public data without CSVs: the paper's split, as the reference runs
                    self._manifest = dv.PAPER_SPLIT_DIR
                self._sources = sources

    def _samples(self) -> Path:
        from skillopt_envs.docvqa.samples import ensure_samples

        return ensure_samples(self.options.sample_dir)

    # ---------- data ----------

    def _items(self, split: str) -> list[dv.DocVQAItem]:
        try:
            return self._read_items(split)
        except OSError as e:  # whatever the checks did not foresee: still one line naming the file
            where = e.filename or self._root
            raise DataError(
                f"{where} cannot be read ({e.strerror or e}); check the files under env.data_dir / DOCVQA_DATA"
            ) from None

    def _read_items(self, split: str) -> list[dv.DocVQAItem]:
        if self._manifest is None:
            return dv.load_split_items(self._root, split, self._image_root)
        if self._pool is None:  # every question of the data, by id; the manifest picks the splits
            if self._sources is not None:
                self._pool = upstream.read_pool(self._sources)
            else:
                self._pool = {
                    it["id"]: it
                    for s in dv.SPLITS
                    if dv.split_csv(self._root / s)
                    for it in dv.load_split_items(self._root, s, self._image_root)
                }
        ids = upstream.read_id_manifest(self._manifest, dv.split_folder(split))
        missing = [i for i in ids if i not in self._pool]
        if missing:
            which = "the paper's split" if self._manifest == dv.PAPER_SPLIT_DIR else "the manifest"
            raise DataError(
                f"{len(missing)} of {len(ids)} question ids of the {dv.split_folder(split)} split in {self._manifest} "
                f"({which}) are not in {self._root} (first: {missing[0]}); give every file of the DocVQA validation "
                "split (lmms-lab/DocVQA, config DocVQA), or set env.manifest_dir to ids your data holds"
            )
        return [self._pool[i] for i in ids]

    def data_note(self) -> str:
        sizes = dv.SplitSizes({s: len(self._items(s)) for s in dv.SPLITS})
        paper = "/".join(str(dv.PAPER_COUNTS[s]) for s in dv.SPLITS)
        if self._using_samples:
            note = (
                f"DocVQA: no data configured (env.data_dir / DOCVQA_DATA) - using built-in sample pages (rendered "
                f"forms, tables and letters) in {self._root}, {sizes.text()} train/val/test questions"
            )
        else:
            same = "as in the paper's split" if sizes.is_paper else f"the paper's split has {paper}"
            where = str(self._root)
            if self._sources is not None:
                ids = (
                    f"the paper's ids shipped in {self._manifest}"
                    if self._manifest == dv.PAPER_SPLIT_DIR
                    else f"the ids in {self._manifest}"
                )
                where = f"{self._sources.describe()} in {self._root}, split by {ids}"
                if self._sources.parquets:
                    cache = self.options.page_cache or upstream.PAGE_CACHE
                    where += f" (env actors write pages out to {cache} on first use)"
            note = f"DocVQA: questions from {where}, {sizes.text()} train/val/test ({same}, {dv.PAPER_SPLIT_NAME})"
        if not self.options.sends_images:
            why = (
                "the embedded model sees no images"
                if self.options.page_input == "auto"
                else "env.options.page_input=text"
            )
            note += (
                f"; {why}: each page goes to the target as its text layer (<image>.txt beside the image) instead of "
                "the image, so scores are not comparable with the paper's"
            )
        return note

    def load_split(self, split: str) -> list[Task]:
        if split == "all":
            return [t for s in dv.SPLITS for t in self.load_split(s)]
        items = split_items(split, self._items, "DocVQA", self._root)
        if self.options.check_images:
            dv.check_images([it for it in items if not it.get("page_source")], dv.split_folder(split))
        tasks = []
        for it in items:
            # a path (or where in a parquet file the page is): the env actor reads the image, never the driver
            payload: dict[str, Any] = {
                "question": it["question"],
                "answers": list(it["answers"]),
                "image_path": it["image_path"],
            }
            payload["docId"] = it["docId"]
            for key in ("page_source", "text_path"):
                if it.get(key):
                    payload[key] = it[key]
            tasks.append(Task(it["id"], it["task_type"], payload))
        return tasks

    def seed_skill(self) -> str:
        return SEED_SKILL

    # ---------- the episode ----------

    async def _image_file(self, payload: dict[str, Any]) -> str:
        """The page image's path on this node (a page inside a parquet file is written out on first use)."""
        image_path = payload["image_path"]
        if payload.get("page_source"):
            cache = Path(os.path.expanduser(self.options.page_cache)) if self.options.page_cache else None
            image_path = str(await asyncio.to_thread(upstream.page_file, payload["page_source"], image_path, cache))
        return str(image_path)

    async def _page_part(self, payload: dict[str, Any]) -> ContentPart:
        image_path = payload["image_path"]
        if self.options.sends_images:
            image_file = await self._image_file(payload)
            dv.check_page_image(image_file)
            return prompts.image_part(image_file, self.options.image_detail)
        if payload.get("text_path"):
            return prompts.text_layer_part(upstream.ocr_text(Path(payload["text_path"])))
        layer = dv.text_layer_path(image_path)
        return prompts.text_layer_part(layer.read_text(encoding="utf-8") if layer.is_file() else "")

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        limit = task_timeout(self.options.exec_timeout)
        try:
            return await asyncio.wait_for(self._episode(task, skill, llm, ctx), limit)
        except asyncio.TimeoutError:
            p = task.payload
            return EpisodeResult(
                task.task_id,
                task.task_type,
                fail_reason=f"task-timeout-{limit:.0f}s",
                task_description=p["question"],
                info={"phase": "timeout", "predicted_answer": "", "gold_answers": list(p["answers"])},
            )

    async def _episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        p = task.payload
        question, answers, image = p["question"], list(p["answers"]), p["image_path"]
        if ctx.agent is not None:  # the agent always gets the page image (page_input applies to chat targets)
            return await self._agent_episode(task, skill, llm, ctx, ctx.agent)
        system = prompts.system_prompt(skill)
        text = prompts.user_text(question)
        try:
            page = await self._page_part(p)
        except OSError as e:
            return _data_error(task, image, e)
        first: list[ChatMessage] = [{"role": "system", "content": system}, prompts.user_message(text, page)]
        replies = await self._chat_turns(task, llm, ctx, first)
        return self._chat_result(task, question, answers, image, system, text, replies)

    async def _agent_episode(
        self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext, agent: Optional[AgentRunner] = None
    ) -> EpisodeResult:
        """The episode for an agent target, which reads the page image from a file (a data error without it)."""
        from skillopt_envs.docvqa.agent import agent_episode

        image = task.payload["image_path"]
        try:
            image = await self._image_file(task.payload)
            if not os.path.isfile(image):
                raise FileNotFoundError(2, "no such file")
            dv.check_page_image(image)
        except OSError as e:
            return _data_error(task, image, e)
        runner = agent or ctx.agent
        assert runner is not None, "an agent episode needs the agent runner the engine hands over"
        return await agent_episode(task, skill, runner, ctx, image, self.options.exec_timeout)

    async def _chat_turns(self, task: Task, llm: LLM, ctx: EpisodeContext, first: list[ChatMessage]) -> list[str]:
        """The chat target's replies: each turn without an answer tag is asked again, up to the turn limit."""
        messages, replies = first, []
        for turn in range(max(1, ctx.max_turns)):
            key = f"{ctx.key}/{task.task_id}/t{turn}"
            reply = await chat(llm, messages, key, self.options.max_completion_tokens, ctx.stage)
            replies.append(reply)
            if has_answer_tag(reply):
                break
            messages = first + [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": prompts.RETRY_TEXT},
            ]
        return replies

    def _chat_result(
        self,
        task: Task,
        question: str,
        answers: list[str],
        image: str,
        system: str,
        text: str,
        replies: list[str],
    ) -> EpisodeResult:
        """The last reply's answer scored (ANLS); the trajectory's image marker says when the page went as text."""
        marker = f"[image] {os.path.basename(image)}"
        if not self.options.sends_images:
            marker += " (sent as its text layer)"
        page_input = "image" if self.options.sends_images else "text"
        shown = f"{text}\n\n{marker}"
        return scored_episode(
            task, question, answers, replies, shown, system, text, os.path.basename(image), page_input
        )


def _data_error(task: Task, image: str, e: OSError) -> EpisodeResult:
    """The page image cannot be read or decoded: a data error naming the file and the fix, never a score."""
    if isinstance(e, dv.PageImageError):
        fix = "replace the file with the page's image (python -m skillopt_envs.docvqa.materialize writes them)"
    else:
        fix = "check env.data_dir / env.options.image_root"
    return EpisodeResult(
        task.task_id,
        task.task_type,
        fail_reason="data_error",
        error=f"cannot read the page image {image}: {e.strerror or e}; {fix}",
        task_description=task.payload["question"],
    )
