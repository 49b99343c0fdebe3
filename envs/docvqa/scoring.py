"""DocVQA scoring as the reference does it: ANLS over the gold answers, answer extraction from the reply.

ANLS (average normalised Levenshtein similarity) per gold: 1 - distance / longer length, and 0 once
that normalised distance reaches 0.5 (inclusive). Strings are compared after stripping, lower-casing and
collapsing whitespace; punctuation stays. hard = ANLS >= 0.999, soft = ANLS.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from skillopt_envs.base import EpisodeResult, Task

HARD_AT = 0.999  # the reference counts an answer right at this ANLS (in practice: equal after normalisation)
THRESHOLD = 0.5  # a normalised distance at or above this scores 0
_OPEN, _CLOSE = "<answer>", "</answer>"


def extract_answer(reply: str) -> str:
    """The text between the last <answer> and the last </answer> (any case) when the closer comes after the
    opener; else the last non-empty line; else the stripped reply."""
    reply = reply or ""
    low = reply.lower()
    start, end = low.rfind(_OPEN), low.rfind(_CLOSE)
    if start >= 0 and end > start:
        return reply[start + len(_OPEN) : end].strip()
    lines = [ln.strip() for ln in reply.splitlines() if ln.strip()]
    return lines[-1] if lines else reply.strip()


def has_answer_tag(reply: str) -> bool:
    """The turn loop's stop test: the reply holds an opening answer tag (any case)."""
    return _OPEN in (reply or "").lower()


def gold_strings(gold: Any) -> list[str]:
    """The reference's reading of a gold value into a list of strings (never empty: nothing becomes [''])."""
    if gold is None:
        return [""]
    if isinstance(gold, str):
        text = gold.strip()
        if not text:
            return [""]
        if text[0] in "[{":
            for parse in (json.loads, ast.literal_eval):
                try:
                    return gold_strings(parse(text))
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    continue
        return [text]
    if isinstance(gold, dict):
        for k in ("answers", "ground_truth", "answer"):
            if k in gold:
                return gold_strings(gold[k])
        return [str(gold)]
    if isinstance(gold, Iterable) and not isinstance(gold, (bytes, bytearray)):
        out: list[str] = []
        for el in gold:
            if isinstance(el, dict):
                key = next((k for k in ("text", "answer", "value") if k in el), None)
                out.extend(gold_strings(el[key]) if key else [str(el)])
            else:
                out.append(str(el))
        return out or [""]
    return [str(gold)]


def normalize(text: Any) -> str:
    """str, strip, lower-case, whitespace runs to one space; punctuation is kept."""
    return " ".join(str(text).strip().lower().split())


def levenshtein(a: str, b: str) -> int:
    """Edit distance with unit costs (insert, delete, substitute)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        cur = [i]
        for j, cb in enumerate(b, start=1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls_term(prediction: str, gold: str) -> float:
    """The similarity of one prediction to one gold, both normalised."""
    p, g = normalize(prediction), normalize(gold)
    if not p and not g:
        return 1.0
    if not p or not g:
        return 0.0
    nl = levenshtein(p, g) / max(len(p), len(g))
    return 0.0 if nl >= THRESHOLD else 1.0 - nl


def anls(prediction: str, golds: Any) -> float:
    """The best term over the golds (read with gold_strings, so an empty list scores as [''])."""
    best = 0.0
    for g in gold_strings(golds):
        best = max(best, anls_term(prediction, g))
    return best


@dataclass(frozen=True)
class DocScore:
    anls: float
    hard: int
    fail_reason: str


def score_answer(prediction: str, answers: Any) -> DocScore:
    """ANLS, hard and the reference's fail_reason (set only when ANLS is 0; `answers` printed as Python does)."""
    value = anls(prediction, answers)
    fail = "" if value > 0 else f"predicted '{prediction}' but expected one of {answers!r}"
    return DocScore(value, int(value >= HARD_AT), fail)


def evaluation_block(question: str, predicted: str, answers: Any, value: float) -> str:
    """The verification entry's text: what the analysts see of the scoring, gold answers included."""
    return (
        f"[EVALUATION RESULT]\nQuestion: {question}\nPredicted answer: {predicted!r}\n"
        f"Gold answers: {answers!r}\nANLS: {value:.4f}"
    )


def scored_episode(
    task: Task,
    question: str,
    answers: list[str],
    replies: list[str],
    shown_user: str,
    system: str,
    user: str,
    image_name: str,
    page_input: str,
    **info: Any,
) -> EpisodeResult:
    """The last reply's answer scored (ANLS), with the trajectory and prompts the optimizer reads. `shown_user` is
    the trajectory's user entry (what the target was asked, with the image marker); `info` adds what the target's
    protocol knows (an agent's turns)."""
    predicted = extract_answer(replies[-1])
    s = score_answer(predicted, answers)
    return EpisodeResult(
        task.task_id,
        task.task_type,
        hard=float(s.hard),
        soft=s.anls,
        fail_reason=s.fail_reason,
        n_turns=len(replies),
        trajectory=[
            {"role": "user", "content": shown_user},
            *({"type": "message", "turn": k, "content": r} for k, r in enumerate(replies, start=1)),
            {"role": "system", "content": evaluation_block(question, predicted, answers, s.anls)},
        ],
        task_description=question,
        info={
            "target_system_prompt": system,
            "target_user_prompt": user,
            "predicted_answer": predicted,
            "gold_answers": answers,
            "anls": s.anls,
            "image": image_name,
            "page_input": page_input,
            **info,
        },
    )
