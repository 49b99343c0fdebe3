"""OfficeQA as the reference runs it: questions about U.S. Treasury Bulletins, answered with document tools.

Default (the paper setting, offline with local tools): the target is offered glob / read / grep as OpenAI
function tools and plays up to env.max_turns (the reference's max_tool_turns, 24) model turns. A reply
with tool calls runs them (in order) and the loop goes on, even when the reply also holds an answer; a
reply without tool calls but with <answer> ends the episode with the FIRST tag's text; anything else
ends it as "neither" (or, on the last turn, as an exceeded budget). A last turn spent on tool calls ends
with no answer and no process failure (quirk: officeqa-last-turn-tools). Scored by the reference's
normalised EM (hard) and token F1 (soft).

The tools run here, in the env actor playing the episode, on this node's copy of the corpus; the driver
and the gateway hold only ids, questions and file names. Options: no tools (one call over the oracle
pages and hints), a text tool protocol for endpoints without function calling (the embedded model), and
custom_search (a controller-run web-search loop against a search proxy you run).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from skillopt_envs.base import (
    LLM,
    Benchmark,
    DataError,
    EnvSettings,
    EpisodeBase,
    EpisodeContext,
    EpisodeResult,
    Task,
    parse_options,
)
from skillopt_envs.chat import ChatMessage, ToolCall
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import ChatRequest, check_choice, data_folder, split_items
from skillopt_envs.officeqa import data as oq
from skillopt_envs.officeqa import prompts
from skillopt_envs.officeqa.oracle import OracleReadError, build_context
from skillopt_envs.officeqa.scoring import extract_answer, has_answer_tag, score
from skillopt_envs.officeqa.tools import TOOL_SCHEMAS, CorpusReadError, LineCache, ToolRuntime

if TYPE_CHECKING:  # only annotations name the agent runner
    from skillopt_envs.base import AgentRunner

# the reference's seed skill, in this project's words: retrieval, evidence and final-answer discipline
SEED_SKILL = """# Skill: answering questions from Treasury Bulletins

## Retrieval Discipline
- Narrow to the file most likely to hold the answer before reading anything at length.
- Search with terms that name the entity, the period, the measure or the table the question is about.
- After a hit, read a small span around it and check the year, the basis (fiscal or calendar) and the unit.

## Evidence Discipline
- Extract the exact printed values before doing any arithmetic.
- Keep track of each operand's period, unit and role in the calculation.
- Compute a derived quantity only once every operand has been confirmed.

## Final Answer Discipline
- Run a last consistency check, then copy the answer from a value you have checked.
"""

SEARCH_MODES = ("offline", "custom_search")
TOOL_PROTOCOLS = ("auto", "function", "text")
BUDGET_FAIL = "Exceeded tool-turn budget ({n})"
NEITHER_FAIL = "Model neither produced a tool request nor a final answer"
NO_ANSWER_FAIL = "Model did not produce a final answer"


def normalise_search_mode(mode: str) -> str:
    """The reference's aliases: custom/custom_search, azure/azure_search; anything else is offline."""
    m = (mode or "").strip().lower()
    if m in ("custom", "custom_search"):
        return "custom_search"
    if m in ("azure", "azure_search"):
        return "azure_search"
    return "offline"


# the one line for a data folder that is not there
MISSING = (
    "OfficeQA data directory {root} does not exist; set env.data_dir or OFFICEQA_DATA to a folder "
    "with officeqa_full.csv (or train/ val/ test/ split files) and the parsed bulletins"
)


@dataclass
class OfficeQAOptions:
    sample_dir: Optional[str] = None
    # corpus directories (the reference's env.data_dirs); relative ones start at env.data_dir; then $OFFICEQA_DOCS_DIR
    # and the fallbacks <data_dir>/{officeqa_docs_official,treasury_bulletins_parsed,officeqa_smoke_docs}, ~/officeqa...
    docs_dirs: list[str] = field(default_factory=list)
    max_completion_tokens: int = 16384
    search_mode: str = "offline"  # offline (the paper's) | custom_search; azure_search is not implemented
    use_local_tools: bool = True  # offline without tools: one call over the oracle pages and the hints
    # function: OpenAI function tools (the reference); text: a tag protocol in the prompt, for endpoints without
    # function calling; auto: text for the embedded provider, function otherwise
    tool_protocol: str = "auto"
    target_provider: str = ""  # filled from llm.target.provider by conf/env/officeqa.yaml, read by tool_protocol=auto
    target_harness: str = "chat"  # filled from llm.target.harness: an agent harness runs offline with local tools only
    show_gold: bool = False  # off = the reference: the gold reaches analysts only in a wrong answer's fail_reason
    max_queries_per_turn: int = 4
    search_api_url: str = ""
    search_auth_env: str = "OFFICEQA_CUSTOM_SEARCH_AUTH"
    search_provider: str = "duckduckgo"
    search_max_num_results: int = 4
    search_timeout_seconds: float = 20.0

    @staticmethod
    def parse(raw: JSONObject) -> OfficeQAOptions:
        opts = parse_options(OfficeQAOptions, raw, "officeqa")
        opts.docs_dirs = list(opts.docs_dirs or [])
        mode = normalise_search_mode(opts.search_mode)
        if mode == "azure_search":
            raise DataError(
                "env.options.search_mode=azure_search is not implemented (it needs the provider's built-in web search); "
                "use offline or custom_search"
            )
        opts.search_mode = mode
        check_choice(opts, "tool_protocol", TOOL_PROTOCOLS)
        if mode == "custom_search" and not opts.search_api_url:
            raise DataError(
                "env.options.search_mode=custom_search needs env.options.search_api_url (your search proxy's URL)"
            )
        if opts.target_harness not in ("", "chat") and not (mode == "offline" and opts.use_local_tools):
            raise DataError(
                f"llm.target.harness={opts.target_harness} runs OfficeQA only offline with local tools (as in the "
                "reference); set env.options.search_mode=offline and env.options.use_local_tools=true, or use "
                "llm.target.harness=chat"
            )
        if opts.max_completion_tokens < 1 or opts.max_queries_per_turn < 1:
            raise DataError("env.options.max_completion_tokens and max_queries_per_turn must be >= 1")
        return opts

    @property
    def text_protocol(self) -> bool:
        if self.tool_protocol == "auto":
            return self.target_provider == "embedded"
        return self.tool_protocol == "text"


@dataclass
class Corpus:
    """This actor's view of the corpus: its roots and its file index."""

    roots: list[Path]
    index: oq.CorpusIndex
    lines: LineCache = field(default_factory=LineCache)  # recently read files, shared by this actor's episodes


class OfficeQABenchmark(Benchmark):
    name = "officeqa"
    agent_harness = True  # llm.target.harness=codex|claude_code: the exec loop, offline with local tools only
    options_class = OfficeQAOptions

    def __init__(self, env_cfg: EnvSettings):
        super().__init__(env_cfg)
        self.options = OfficeQAOptions.parse(dict(env_cfg.get("options") or {}))
        self._root, self._using_samples = data_folder(env_cfg, "OFFICEQA_DATA", MISSING, self._samples)
        self._corpus: Optional[Corpus] = None
        auth = self.options.search_auth_env
        if self.options.search_mode == "custom_search" and not (auth and os.environ.get(auth)):
            raise DataError(
                f"env.options.search_mode=custom_search needs the search token in the environment variable {auth or '?'} "
                "(env.options.search_auth_env)"
            )

    def _samples(self) -> Path:
        from skillopt_envs.officeqa.samples import ensure_samples

        return ensure_samples(self.options.sample_dir)

    # ---------- data ----------

    def _manifest_dir(self) -> Optional[Path]:
        """None = the data folder's own split files; else the id manifests choosing rows of officeqa_full.csv."""
        if self.env_cfg.get("manifest_dir"):
            return Path(os.path.expanduser(str(self.env_cfg["manifest_dir"])))
        if any(oq.split_file(self._root / s) for s in oq.SPLITS):
            return None
        return oq.PAPER_SPLIT_DIR

    def _items(self, split: str) -> list[oq.OfficeItem]:
        folder = oq.split_folder(split)
        manifests = self._manifest_dir()
        if manifests is None:
            return oq.read_split_folder(self._root / folder, folder)
        csv_path = self._root / oq.FULL_CSV
        if not csv_path.is_file() and any(oq.split_file(self._root / s) for s in oq.SPLITS):
            return oq.items_from_split_files(self._root, manifests, folder)  # env.manifest_dir picks from them
        if not csv_path.is_file():
            raise DataError(
                f"{self._root} holds neither train/ val/ test/ split files nor {oq.FULL_CSV}; download the gated "
                "databricks/officeqa dataset there (see the README) or point env.data_dir at it"
            )
        return oq.items_from_full_csv(csv_path, manifests, folder)

    def data_note(self) -> str:
        sizes = "/".join(str(len(self._items(s))) for s in oq.SPLITS)
        paper = "/".join(str(oq.PAPER_COUNTS[s]) for s in oq.SPLITS)
        if self._using_samples:
            note = (
                f"OfficeQA: no data configured (env.data_dir / OFFICEQA_DATA) - using built-in sample bulletins and "
                f"questions in {self._root}, {sizes} train/val/test"
            )
        else:
            which = "the data folder's split files" if self._manifest_dir() is None else "SkillOpt's paper split"
            note = f"OfficeQA: questions from {self._root} ({which}), {sizes} train/val/test (the paper's: {paper})"
        mode = self.options.search_mode
        if mode == "offline" and not self.options.use_local_tools:
            mode = "offline without tools"
        elif mode == "offline" and self.options.text_protocol:
            mode = "offline with tools sent as a text protocol (the endpoint has no function calling)"
        return note + f"; mode {mode}; the corpus is read on each env actor's node"

    def load_split(self, split: str) -> list[Task]:
        if split == "all":
            return [t for s in oq.SPLITS for t in self.load_split(s)]
        items = split_items(split, self._items, "OfficeQA", self._root)
        return [
            Task(
                it["id"],
                it["task_type"],
                {
                    "question": it["question"],
                    "ground_truth": it["ground_truth"],
                    "source_files": list(it["source_files"]),
                    "source_docs": list(it["source_docs"]),
                },
            )
            for it in items
        ]

    def seed_skill(self) -> str:
        return SEED_SKILL

    # ---------- the corpus, on this actor's node ----------

    def corpus(self) -> Corpus:
        """The document roots and file index on this node (DataError naming the paths when there is none)."""
        if self._corpus is None:
            oq.check_named_dirs(self.options.docs_dirs, self._root)
            cands = oq.docs_candidates(self.options.docs_dirs, self._root)
            roots = oq.resolve_docs_roots(cands)
            self._corpus = Corpus(roots, oq.CorpusIndex.build(roots))
        return self._corpus

    def preflight(self, splits: Any) -> None:
        """The splits, and the corpus when this process can see it: a docs_dirs folder that does not exist or a
        link loop in the corpus is one line before Ray starts (the env actors check it again on their nodes)."""
        super().preflight(splits)
        self.corpus()

    def warm_up(self) -> None:
        corpus = self.corpus()
        if self.options.target_harness not in ("", "chat"):  # checked where the corpus is, before any episode
            self._check_agent_paths(corpus)

    @staticmethod
    def _check_agent_paths(corpus: Corpus) -> None:
        """The reference refuses to show an agent a folder of gold answers; here that stops the run in one line."""
        from skillopt_envs.sandbox import check_paths

        try:
            check_paths(list(corpus.roots))
        except ValueError as e:
            raise DataError(f"{e}; point env.options.docs_dirs at the corpus alone") from None

    # ---------- the episode ----------

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        p = task.payload
        corpus = self.corpus()
        files, docs = list(p["source_files"]), list(p["source_docs"])
        mode = self.options.search_mode
        offline = mode == "offline"
        candidates = corpus.index.candidates(files) if offline or files else []
        base = EpisodeBase(task_description=p["question"])
        try:
            oracle = await asyncio.to_thread(
                build_context,
                files,
                docs,
                corpus.roots,
                "custom_search" if not offline else ("tools" if self.options.use_local_tools else "no_tools"),
            )
        except OracleReadError as e:
            return EpisodeResult(
                task.task_id,
                task.task_type,
                error=str(e),
                infra_error=True,
                fail_reason="infra_error",
                error_kind="corpus_read",
                **base,
            )
        if ctx.agent is not None:
            return await self._agent_episode(
                task, skill, llm, ctx, ctx.agent, corpus, candidates, oracle.text, oracle.pages
            )
        episode = Episode(self.options, task, skill, llm, ctx, corpus, candidates, oracle.text)
        if not offline:
            from skillopt_envs.officeqa.search import run_custom_search

            await run_custom_search(episode)
        elif self.options.use_local_tools:
            await episode.tool_loop()
        else:
            await episode.single_call()
        return episode.result(oracle.pages)

    async def _agent_episode(
        self,
        task: Task,
        skill: str,
        llm: LLM,
        ctx: EpisodeContext,
        agent: AgentRunner,
        corpus: Corpus,
        candidates: list[Path],
        oracle: str,
        oracle_pages: int,
    ) -> EpisodeResult:
        from skillopt_envs.officeqa.agent import agent_episode

        if not (self.options.search_mode == "offline" and self.options.use_local_tools):
            raise DataError(
                "an agent harness target runs OfficeQA only offline with local tools (as in the reference); set "
                "env.options.search_mode=offline and env.options.use_local_tools=true, or use llm.target.harness=chat"
            )
        self._check_agent_paths(corpus)
        p = task.payload
        extra: JSONObject = {
            "source_files": list(p["source_files"]),
            "resolved_source_paths": [str(c) for c in candidates],
            "oracle_parsed_pages_included": bool(oracle),
            "oracle_parsed_pages_chars": len(oracle),
            "oracle_pages": oracle_pages,
            "use_local_tools": True,
            "gold_answers": [p["ground_truth"]] if p["ground_truth"] else [],
        }
        res = await agent_episode(task, skill, agent, ctx, corpus.roots, candidates, oracle, extra)
        if self.options.show_gold:
            res.info["analyst_blocks"] = [["Gold Answer", p["ground_truth"]], *res.info.get("analyst_blocks", [])]
        return res


class Episode:
    """One item's conversation: the messages sent, the conversation the analysts see, and the outcome."""

    def __init__(
        self,
        opts: OfficeQAOptions,
        task: Task,
        skill: str,
        llm: LLM,
        ctx: EpisodeContext,
        corpus: Corpus,
        candidates: list[Path],
        oracle: str,
    ):
        p = task.payload
        self.opts, self.task, self.llm, self.ctx = opts, task, llm, ctx
        self.question, self.gold = p["question"], p["ground_truth"]
        self.files, self.docs = list(p["source_files"]), list(p["source_docs"])
        self.candidates = candidates
        self.oracle = oracle
        offline = opts.search_mode == "offline"
        # allowed files: the candidates' names; with no source_files the candidates are every corpus file
        self.runtime = ToolRuntime(corpus.roots, {c.name for c in candidates}, corpus.lines)
        self.system = prompts.system_prompt(skill, opts.use_local_tools, opts.text_protocol)
        if not offline:
            from skillopt_envs.officeqa.search import system_prompt as search_system

            self.system = search_system(skill, self.max_turns, opts.max_queries_per_turn)
        self.user = self.first_user(offline)
        self.messages: list[ChatMessage] = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.user},
        ]
        self.conversation: list[JSONObject] = [{"role": "user", "content": self.user}]
        self.final_answer = ""
        self.fail = ""
        self.response = ""
        self.finish_reason = ""
        self.error: Optional[str] = None
        self.error_kind = ""
        self.calls = 0
        # where the episode's time goes (seconds): waiting on the model, in the tools (scripts/bench_officeqa_tools.py)
        self.model_s = 0.0
        self.tool_s = 0.0
        self.started = time.perf_counter()

    @property
    def max_turns(self) -> int:
        return max(1, self.ctx.max_turns)

    def first_user(self, offline: bool) -> str:
        tail = ""
        if not offline:
            from skillopt_envs.officeqa.search import first_user_tail

            tail = first_user_tail(1, self.max_turns, self.opts.max_queries_per_turn)
        return prompts.user_prompt(
            self.question,
            self.oracle,
            [str(c) for c in self.candidates],
            self.docs,
            self.files,
            offline=offline,
            tail=tail,
        )

    async def call(self, turn: int, tools: bool) -> Any:
        req = ChatRequest(
            "target",
            self.ctx.stage or "rollout",
            list(self.messages),
            f"{self.ctx.key}/{self.task.task_id}/t{turn}",
            max_tokens=self.opts.max_completion_tokens,
            tools=TOOL_SCHEMAS if tools else None,
            tool_choice="auto" if tools else None,
        )
        t0 = time.perf_counter()
        reply = await self.llm.chat(req)
        self.model_s += time.perf_counter() - t0
        self.finish_reason = getattr(reply, "finish_reason", "") or ""
        return reply

    async def tool_loop(self) -> None:
        text = self.opts.text_protocol
        for turn in range(1, self.max_turns + 1):
            reply = await self.call(turn, tools=not text)
            response = reply.content or ""
            self.response = response
            calls: list[ToolCall] = (
                prompts.text_tool_calls(response) if text else list(getattr(reply, "tool_calls", None) or [])
            )
            assistant: ChatMessage = {"role": "assistant", "content": response}
            if calls and not text:
                assistant["tool_calls"] = calls
            self.messages.append(assistant)
            self.conversation.append({"type": "message", "content": response})
            if calls:  # a tool call wins over an answer in the same reply
                results = []
                for call in calls:
                    fn = call.get("function") or {}
                    t0 = time.perf_counter()
                    try:
                        done = await asyncio.to_thread(self.runtime.run, str(fn.get("name") or ""), fn.get("arguments"))
                    except CorpusReadError as e:
                        self.error, self.error_kind = str(e), e.kind
                        self.conversation.append(
                            {"type": "tool_call", "command": fn.get("name", ""), "output": f"[{e}]"}
                        )
                        return
                    self.tool_s += time.perf_counter() - t0
                    self.calls += 1
                    self.conversation.append({"type": "tool_call", "command": done.command, "output": done.output})
                    results.append((done.command, done.output))
                    if not text:
                        self.messages.append(
                            {"role": "tool", "tool_call_id": call.get("id", ""), "content": done.output}
                        )
                if text:
                    self.messages.append({"role": "user", "content": prompts.text_tool_results(results)})
                continue
            if has_answer_tag(response):
                self.final_answer = extract_answer(response)
                return
            self.fail = BUDGET_FAIL.format(n=self.max_turns) if turn == self.max_turns else NEITHER_FAIL
            return
        # the last turn made tool calls: no answer and no process failure (quirk: officeqa-last-turn-tools)

    async def single_call(self) -> None:
        reply = await self.call(1, tools=False)
        self.response = reply.content or ""
        self.messages.append({"role": "assistant", "content": self.response})
        self.conversation.append({"type": "message", "content": self.response})
        if has_answer_tag(self.response):
            self.final_answer = extract_answer(self.response)
        else:
            self.fail = NO_ANSWER_FAIL

    def result(self, oracle_pages: int) -> EpisodeResult:
        info: JSONObject = {
            "target_system_prompt": self.system,
            "target_user_prompt": self.user,
            "source_files": self.files,
            "resolved_source_paths": [str(c) for c in self.candidates],
            "oracle_parsed_pages_included": bool(self.oracle),
            "oracle_parsed_pages_chars": len(self.oracle),
            "oracle_pages": oracle_pages,
            "use_local_tools": self.opts.use_local_tools,
            "tool_calls": self.calls,
            "last_finish_reason": self.finish_reason,
            "response": self.response,
            "timing_s": {
                "episode": round(time.perf_counter() - self.started, 6),
                "model": round(self.model_s, 6),
                "tools": round(self.tool_s, 6),
                "model_calls": sum(e.get("type") == "message" for e in self.conversation),
            },
            "gold_answers": [self.gold] if self.gold else [],
        }
        if self.opts.show_gold:
            info["analyst_blocks"] = [["Gold Answer", self.gold]]
        if self.error is not None:  # a corpus file could not be read: not the agent's failure, never a score
            info.update(predicted_answer="", agent_ok=False)
            return EpisodeResult(
                self.task.task_id,
                self.task.task_type,
                fail_reason="infra_error",
                n_turns=len(self.conversation),
                trajectory=self.conversation,
                error=self.error,
                infra_error=True,
                error_kind=self.error_kind,
                task_description=self.question,
                info=info,
            )
        s = score(self.final_answer, self.gold, self.fail)
        info.update(predicted_answer=s.predicted, agent_ok=s.agent_ok)
        return EpisodeResult(
            self.task.task_id,
            self.task.task_type,
            hard=float(s.hard),
            soft=s.soft,
            fail_reason=s.fail_reason,
            n_turns=len(self.conversation),
            trajectory=self.conversation,
            task_description=self.question,
            info=info,
        )
