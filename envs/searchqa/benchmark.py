"""SearchQA: one turn; the target reads the skill, the question and search snippets, and answers in <answer> tags.

Data is SkillOpt's materialised format: `<data_dir>/{train,val,test}/items.json`, each item
`{id, question, context, answers}`. With `manifest_dir`, its id lists choose the items (looked
up across all of data_dir's splits). Contexts are cut at document boundaries.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from envs.base import LLM, Benchmark, DataError, EpisodeContext, EpisodeResult, Task, parse_options
from envs.searchqa.scoring import score
from skillopt_ray.llm.types import ChatRequest

SEED_SKILL = """# Search question answering skill

## Goal
Answer the question from the search results with a short answer: a name, a number or a short phrase.

## How to answer
- Put only the answer inside <answer></answer> tags.
"""

SPLITS = ("train", "val", "test")
_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)
_DOC = re.compile(r"(?=\[DOC\])")


@dataclass
class QAOptions:
    max_context_chars: int = 6000
    skip_missing_items: bool = False
    sample_dir: Optional[str] = None

    @staticmethod
    def parse(raw: dict[str, Any]) -> "QAOptions":
        return parse_options(QAOptions, raw, "searchqa")


def split_documents(context: str) -> list[str]:
    """`[DOC]`-marked documents when present, else blank-line separated paragraphs."""
    if "[DOC]" in context:
        return [d.strip() for d in _DOC.split(context) if d.strip()]
    return [d.strip() for d in re.split(r"\n\s*\n", context) if d.strip()]


def truncate_context(context: str, limit: int) -> str:
    """Whole documents while they fit; a first document longer than the limit is cut."""
    docs = split_documents(context)
    kept: list[str] = []
    used = 0
    for d in docs:
        if used + len(d) + 2 > limit:
            if not kept:
                kept.append(d[:limit])
            break
        kept.append(d)
        used += len(d) + 2
    return "\n\n".join(kept)


def extract_answer(reply: str) -> Optional[str]:
    found = _ANSWER.findall(reply or "")
    return found[-1].strip() if found else None


def _answers(item: dict[str, Any]) -> list[str]:
    a = item.get("answers")
    if isinstance(a, str):
        return [a]
    if isinstance(a, list):
        return [str(x) for x in a]
    raise DataError(f"item {item.get('id')!r} has no answers list")


class SearchQABenchmark(Benchmark):
    name = "searchqa"

    def __init__(self, env_cfg: dict[str, Any]):
        super().__init__(env_cfg)
        self.options = QAOptions.parse(dict(env_cfg.get("options") or {}))
        raw = env_cfg.get("data_dir") or os.environ.get("SEARCHQA_DATA")
        self._using_samples = not raw
        if raw:
            self._root = Path(os.path.expandvars(os.path.expanduser(raw))).resolve()
            if not self._root.is_dir():
                raise DataError(f"SearchQA data directory {self._root} does not exist; set env.data_dir or SEARCHQA_DATA "
                                "to a folder with train/ val/ test/ items.json")
        else:
            from envs.searchqa.samples import ensure_sample_items

            self._root = ensure_sample_items(self.options.sample_dir)

    def data_note(self) -> str:
        if self._using_samples:
            return f"SearchQA: no data configured (env.data_dir / SEARCHQA_DATA) - using built-in sample items in {self._root}"
        return f"SearchQA: items from {self._root}"

    def _items(self, split: str) -> list[dict[str, Any]]:
        path = self._root / split / "items.json"
        if not path.is_file():
            raise DataError(f"{path} not found; a SearchQA data directory holds train/ val/ test/ items.json")
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise DataError(f"{path} is not valid JSON: {e}") from None
        for it in items:
            if not all(k in it for k in ("id", "question", "context", "answers")):
                raise DataError(f"{path}: item {str(it)[:80]} lacks one of id, question, context, answers "
                                "(an id-only manifest goes in env.manifest_dir, with the items in env.data_dir)")
        return items

    def load_split(self, split: str) -> list[Task]:
        if split == "all":
            return [t for s in SPLITS for t in self.load_split(s)]
        if split not in SPLITS:
            raise DataError(f"unknown SearchQA split {split!r}; use train, val, test or all")
        manifest = self.env_cfg.get("manifest_dir")
        if manifest:
            pool = {str(it["id"]): it for s in SPLITS if (self._root / s / "items.json").is_file() for it in self._items(s)}
            path = Path(manifest).expanduser() / split / "items.json"
            if not path.is_file():
                raise DataError(f"manifest {path} not found; env.manifest_dir must hold train/ val/ test/ items.json")
            ids = [str(x["id"]) for x in json.loads(path.read_text(encoding="utf-8"))]
            missing = [i for i in ids if i not in pool]
            if missing and not self.options.skip_missing_items:
                raise DataError(f"{len(missing)} of {len(ids)} ids in {path} have no item in {self._root} (first: {missing[0]}); "
                                "materialise them or set env.options.skip_missing_items=true")
            items = [pool[i] for i in ids if i in pool]
        else:
            items = self._items(split)
        if not items:
            raise DataError(f"the SearchQA {split} split is empty")
        return [Task(str(it["id"]), "qa", {"question": it["question"], "context": it["context"], "answers": _answers(it)}) for it in items]

    def seed_skill(self) -> str:
        return SEED_SKILL

    async def run_episode(self, task: Task, skill: str, llm: LLM, ctx: EpisodeContext) -> EpisodeResult:
        p = task.payload
        context = truncate_context(p["context"], self.options.max_context_chars)
        messages = [
            {"role": "system", "content": "You answer questions from search results. Read the skill below and follow it.\n\n"
                                          "=== SKILL ===\n" + skill.strip() + "\n=== END SKILL ==="},
            {"role": "user", "content": f"Search results:\n{context}\n\nQuestion: {p['question']}\n\n"
                                        "Reply with the answer inside <answer></answer> tags."},
        ]
        reply = await llm.chat(ChatRequest("target", "rollout", messages, f"{ctx.key}/{task.task_id}/t0"))
        answer = extract_answer(reply.content)
        hard, soft = score(answer, p["answers"]) if answer is not None else (0.0, 0.0)
        reason = "" if hard else ("no_answer" if answer is None else "wrong_answer" if soft == 0 else "partial_answer")
        return EpisodeResult(task.task_id, task.task_type, hard=hard, soft=soft, fail_reason=reason, n_turns=1,
                             trajectory=[{"question": p["question"], "reply": reply.content[:1000], "answer": answer,
                                          "gold": p["answers"][:3]}])
