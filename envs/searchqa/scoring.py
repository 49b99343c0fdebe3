"""SearchQA scoring as the reference does it, with SQuAD normalisation.

hard = exact match, soft = token F1, both the best over the gold answers; sub_em (one normalised
string contains the other) is logged beside them and scores nothing.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize(text: str) -> str:
    """Lowercase, drop ASCII punctuation, blank out whole-word articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize(prediction) == normalize(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 over normalised tokens of one gold answer; two empty strings agree (1.0)."""
    pred, ref = normalize(prediction).split(), normalize(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_f1(prediction: str, golds: list[str]) -> float:
    """The best F1 over the golds. Golds that normalise to nothing are skipped; an empty prediction scores
    1.0 only if some gold is empty too."""
    if not normalize(prediction):
        return float(any(not normalize(g) for g in golds))
    return max((token_f1(prediction, g) for g in golds if normalize(g)), default=0.0)


def sub_exact_match(prediction: str, golds: list[str]) -> int:
    """1 if the normalised prediction and some normalised gold contain one another (an empty side matches
    only an empty side)."""
    p = normalize(prediction)
    for g in map(normalize, golds):
        if (p and g and (p in g or g in p)) or (not p and not g):
            return 1
    return 0


@dataclass(frozen=True)
class QAScore:
    em: int
    f1: float
    sub_em: int


def score_answer(prediction: str, golds: Iterable[str]) -> QAScore:
    golds = list(golds)
    if not golds:
        return QAScore(0, 0.0, 0)
    em = int(any(normalize(prediction) == normalize(g) for g in golds))
    return QAScore(em, best_f1(prediction, golds), sub_exact_match(prediction, golds))


def score(prediction: str, golds: Iterable[str]) -> tuple[float, float]:
    """(exact match, F1), each the best over the gold answers."""
    s = score_answer(prediction, golds)
    return float(s.em), s.f1
