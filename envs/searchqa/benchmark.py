"""SearchQA as the reference runs it: one turn, no feedback to the target.

The target reads the skill, the search-result context and the question, reasons, and ends with its
answer in <answer> tags. The last tag wins; a reply without one is answered by its last non-empty
line. hard = exact match, soft = token F1 (best over the gold answers); sub_em is logged beside them.

Splits on real data: SkillOpt's paper split (400/200/1400 ids, shipped in envs/searchqa/splits) picks
the items from `env.data_dir`; `env.manifest_dir` names other id manifests; with
`env.options.split_source=folders` the data folder's own train/val/test items are the splits.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from skillopt_envs.base import (
    LLM,
    AgentInfo,
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
from skillopt_envs.kit import chat, check_choice, data_folder, infra_episode, missing_counts
from skillopt_envs.searchqa import data as qa_data
from skillopt_envs.searchqa.data import SearchQAItem
from skillopt_envs.searchqa.prompts import system_prompt, user_prompt
from skillopt_envs.searchqa.scoring import score_answer

# the reference starts from an empty skill: a title and a placeholder line
SEED_SKILL = """# Skill: answering questions from search results

No rules have been learned yet; they will be added here as training finds them.
"""

TASK_TYPE = "qa"
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_TRUNCATED = "\n...[truncated]"


# the one line for a data folder that is not there
MISSING = (
    "SearchQA data directory {root} does not exist; set env.data_dir or SEARCHQA_DATA "
    "to a folder with train/ val/ test/ items.json (python -m skillopt_envs.searchqa.materialize writes one)"
)


@dataclass
class QAOptions:
    max_context_chars: int = 6000
    skip_missing_items: bool = False
    sample_dir: Optional[str] = None
    # which items make the splits on real data: `paper` (SkillOpt's id split, shipped) or `folders` (data_dir's own)
    split_source: str = "paper"

    @staticmethod
    def parse(raw: JSONObject) -> QAOptions:
        opts = parse_options(QAOptions, raw, "searchqa")
        check_choice(opts, "split_source", ("paper", "folders"))
        if opts.max_context_chars < 1:
            raise DataError(f"env.options.max_context_chars={opts.max_context_chars!r}: it must be >= 1")
        return opts


def truncate_context(context: str, limit: int = 6000) -> str:
    """The reference's rule: a context within the limit is kept as it is. A longer one is split on the literal
    `[DOC]`; pieces are added while the result stays within the limit, the first one bare and each later one
    behind a `[DOC]` marker (so the first document loses its marker when the context starts with `[DOC]`).
    If nothing fits, the first `limit` characters and a truncation mark."""
    if len(context) <= limit:
        return context
    out = ""
    for piece in context.split("[DOC]"):
        nxt = out + "[DOC]" + piece if out else piece
        if len(nxt) > limit:
            break
        out = nxt
    return out if out else context[:limit] + _TRUNCATED


def extract_answer(reply: str) -> str:
    """The last <answer>...</answer> (any case, across lines), else the last non-empty line, else the reply."""
    reply = reply or ""
    tagged = _ANSWER.findall(reply)
    if tagged:
        return tagged[-1].strip()
    lines = [ln.strip() for ln in reply.splitlines() if ln.strip()]
    return lines[-1] if lines else reply.strip()


def evaluation_block(question: str, predicted: str, golds: list[str], em: int, f1: float) -> str:
    # the reference keeps exact match as a float here, so the analysts read `Exact Match: 0.0` or `1.0`
    return (
        f"[EVALUATION RESULT]\nQuestion: {question}\nPredicted answer: {predicted!r}\nGold answers: {golds!r}\n"
        f"Exact Match: {float(em)}\nF1: {f1:.4f}"
    )


class SearchQABenchmark(Benchmark):
    name = "searchqa"
    holds_env_state = False  # chat episodes: one env actor runs them all
    agent_harness = True  # llm.target.harness=codex|claude_code runs each episode in an agent CLI
    options_class = QAOptions

    def __init__(self, env_cfg: EnvSettings):
        super().__init__(env_cfg)
        self.options = QAOptions.parse(dict(env_cfg.get("options") or {}))
        self._pool: Optional[dict[str, SearchQAItem]] = None
        self._root, self._using_samples = data_folder(env_cfg, "SEARCHQA_DATA", MISSING, self._samples)

    def _samples(self) -> Path:
        from skillopt_envs.searchqa.samples import ensure_sample_items

        return ensure_sample_items(self.options.sample_dir)

    # ---------- data ----------

    def _manifest_dir(self) -> Optional[Path]:
        """The id manifests that define the splits: env.manifest_dir, else the shipped paper split on real data;
        None = the data folder's own splits (sample items, or split_source=folders)."""
        if self.env_cfg.get("manifest_dir"):
            return Path(os.path.expanduser(str(self.env_cfg["manifest_dir"])))
        if self._using_samples or self.options.split_source == "folders":
            return None
        return qa_data.PAPER_SPLIT_DIR

    def _items_pool(self) -> dict[str, SearchQAItem]:
        if self._pool is None:
            self._pool = qa_data.load_pool(self._root)
        return self._pool

    def data_note(self) -> str:
        if self._using_samples:
            return f"SearchQA: no data configured (env.data_dir / SEARCHQA_DATA) - using built-in sample items in {self._root}"
        paper = "/".join(str(qa_data.PAPER_COUNTS[s]) for s in qa_data.SPLITS)
        manifests = self._manifest_dir()
        if manifests is None:
            counts = [
                len(qa_data.read_items(p)) if (p := qa_data.split_file(self._root / s)) else 0 for s in qa_data.SPLITS
            ]
            same = counts == [qa_data.PAPER_COUNTS[s] for s in qa_data.SPLITS]
            return (
                f"SearchQA: items from {self._root}, its own split folders (env.options.split_source=folders), "
                f"{'/'.join(map(str, counts))} train/val/test items"
                + ("" if same else f"; split sizes differ from the paper's {paper}")
            )
        is_paper = manifests == qa_data.PAPER_SPLIT_DIR
        which = "SkillOpt's paper split (shipped)" if is_paper else f"id manifests {manifests}"
        presence = qa_data.manifest_presence(self._items_pool(), manifests)
        sizes = "/".join(str(p.present) for p in presence)
        missing = [p for p in presence if p.present < p.listed]
        differs = [p.present for p in presence] != [qa_data.PAPER_COUNTS[p.split] for p in presence]
        note = f"SearchQA: items from {self._root}; {which}"
        if not missing:
            return (
                note
                + f", {sizes} train/val/test items"
                + ("; split sizes differ from the paper's " + paper if differs else " as in the paper")
            )
        listed, gone = missing_counts(presence)
        action = (
            "they are skipped (env.options.skip_missing_items=true)"
            if self.options.skip_missing_items
            else "the run stops: materialise them (python -m skillopt_envs.searchqa.materialize) or set env.options.skip_missing_items=true"
        )
        return (
            note
            + f": only {sizes} of its {listed} train/val/test items are in the data ({gone} missing) - {action}"
            + (f"; split sizes differ from the paper's {paper}" if differs else "")
        )

    def load_split(self, split: str) -> list[Task]:
        if split == "all":
            return [t for s in qa_data.SPLITS for t in self.load_split(s)]
        folder = qa_data.split_folder(split)
        manifests = self._manifest_dir()
        if manifests is not None:
            pool = self._items_pool()
            ids = qa_data.read_manifest(manifests, folder)
            missing = [i for i in ids if i not in pool]
            if missing and not self.options.skip_missing_items:
                raise DataError(
                    f"{len(missing)} of {len(ids)} ids of the {folder} split in {manifests} have no item in {self._root} "
                    f"(first: {missing[0]}); materialise them (python -m skillopt_envs.searchqa.materialize) "
                    "or set env.options.skip_missing_items=true"
                )
            items = [pool[i] for i in ids if i in pool]
        else:
            path = qa_data.split_file(self._root / folder)
            if path is None:
                raise DataError(
                    f"{self._root / folder} holds no items.json; a SearchQA data directory holds train/ val/ test/ items.json"
                )
            items = qa_data.read_items(path)
        if not items:
            raise DataError(f"the SearchQA {folder} split is empty")
        return [
            Task(
                str(it["id"]),
                TASK_TYPE,
                {"question": it["question"], "context": it["context"], "answers": list(it["answers"])},
            )
            for it in items
        ]

    def seed_skill(self) -> str:
        return SEED_SKILL

    # ---------- the episode ----------

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        p = task.payload
        question, golds = p["question"], list(p["answers"])
        user = user_prompt(truncate_context(p["context"], self.options.max_context_chars), question)
        extra: AgentInfo = {}
        if ctx.agent is not None:
            from skillopt_envs.searchqa.agent import agent_reply

            outcome = await agent_reply(task, skill, ctx.agent, ctx, user)
            if not outcome.ok:
                return infra_episode(task, outcome.error, outcome.error_kind, n_turns=1)
            content, system = outcome.reply, outcome.skill_md
            extra = outcome.info
        else:
            system = system_prompt(skill)
            messages: list[ChatMessage] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            content = await chat(llm, messages, f"{ctx.key}/{task.task_id}/t0", stage=ctx.stage)
        predicted = extract_answer(content)
        s = score_answer(predicted, golds)
        fail = "" if s.em else f"EM=0: predicted '{predicted}' but expected {golds!r}"
        return EpisodeResult(
            task.task_id,
            task.task_type,
            hard=float(s.em),
            soft=s.f1,
            fail_reason=fail,
            n_turns=1,
            trajectory=[
                {"type": "message", "turn": 1, "content": content},
                {"role": "system", "content": evaluation_block(question, predicted, golds, s.em, s.f1)},
            ],
            # the reference's results carry no task text or type, so the analyst's header lines are empty
            # (quirk: searchqa-blank-header)
            task_description="",
            info={
                "header_task_type": "",
                "target_system_prompt": system,
                "target_user_prompt": user,
                "predicted_answer": predicted,
                "gold_answers": golds,
                "em": s.em,
                "f1": s.f1,
                "sub_em": s.sub_em,
                **extra,
            },
        )
