"""OfficeQA scoring as the reference does it: its own normalisation, exact match and token F1, no tolerance.

The reference does not use the upstream OfficeQA scorer: `1,234.50` is not `1234.5` and `12.5%` is not
`12.5` (kept for fidelity). hard = EM, soft = F1; an empty final answer is not scored (0, 0).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass

# every ASCII punctuation character except the three the reference keeps: . - %
_DROPPED = set(string.punctuation) - {".", "-", "%"}
_UNIT_WORDS = re.compile(r"\b(?:millions?|billions?|dollars?|nominal)\b")
_FIRST_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


def normalize_answer(text: str) -> str:
    """Lower-case and strip; drop commas and the punctuation not kept; blank out the unit words; collapse spaces."""
    text = (text or "").lower().strip().replace(",", "")
    text = "".join(ch for ch in text if ch not in _DROPPED)
    return " ".join(_UNIT_WORDS.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def token_f1(prediction: str, gold: str) -> float:
    """F1 over whitespace tokens of the normalised strings: both empty 1, one empty 0, no overlap 0."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred and not ref:
        return 1.0
    if not pred or not ref:
        return 0.0
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def has_answer_tag(reply: str) -> bool:
    return "<answer>" in (reply or "").lower()


def extract_answer(reply: str) -> str:
    """The FIRST <answer>...</answer> (any case, across lines), stripped; else the last non-empty line."""
    m = _FIRST_ANSWER.search(reply or "")
    if m:
        return m.group(1).strip()
    lines = [ln.strip() for ln in (reply or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@dataclass(frozen=True)
class Score:
    hard: int
    soft: float
    predicted: str
    fail_reason: str
    process_failed: bool = False  # the loop itself failed (budget, error, no answer): agent_ok is then False

    @property
    def agent_ok(self) -> bool:
        return not self.process_failed


def score(final_answer: str, gold: str, process_fail: str = "") -> Score:
    """The reference's result fields: evaluation only for a non-empty answer; the process failure, if any, is the
    fail_reason, else a wrong answer's `predicted '<p>' but expected '<g>'`."""
    predicted = (final_answer or "").strip()
    em, f1 = (exact_match(predicted, gold), token_f1(predicted, gold)) if predicted else (False, 0.0)
    if process_fail:
        reason = process_fail
    elif not em:
        reason = f"predicted '{predicted}' but expected '{gold}'"
    else:
        reason = ""
    return Score(int(em), f1, predicted, reason, bool(process_fail))
