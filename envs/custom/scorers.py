"""The built-in scorers of a user's task file (`env.options.scorer`), each a pure function of the reply and the task.

Every scorer returns a value in [0, 1] and the reason the analysts read. The answer is taken from the reply's last
<answer>...</answer>, else its last non-empty line (the built-in benchmarks' rule); `contains` reads the whole reply.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import regex as _regex
from skillopt_envs.jsontypes import JSONObject
from skillopt_envs.kit import anls, best_f1, normalize

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# one regex match's time limit: a pattern such as (a|aa)+$ backtracks for ever on a long enough reply
REGEX_TIMEOUT_S = 1.0


class Unscorable(Exception):
    """The task's answer cannot be compared with this reply (a pattern that does not finish): a data error naming
    the answer, never a 0 that looks real."""


@dataclass(frozen=True)
class Score:
    """A scorer's verdict: `value` in [0, 1] and why, in a line the analysts can act on."""

    value: float
    reason: str


@dataclass(frozen=True)
class ScoreInput:
    """What a scorer reads: the whole reply, the answer taken from it, the accepted answers and the task's line."""

    reply: str
    answer: str
    golds: list[str]
    task: JSONObject
    tolerance: float = 1e-6


def extract_answer(reply: str) -> str:
    """The last <answer>...</answer> (any case, across lines), else the last non-empty line, else the reply."""
    tagged = _ANSWER.findall(reply or "")
    if tagged:
        return tagged[-1].strip()
    lines = [ln.strip() for ln in (reply or "").splitlines() if ln.strip()]
    return lines[-1] if lines else (reply or "").strip()


def exact_match(x: ScoreInput) -> Score:
    got = normalize(x.answer)
    hit = any(got == normalize(g) for g in x.golds)
    return Score(float(hit), f"exact match after normalising: {got!r} {'is' if hit else 'is not'} one of the answers")


def contains(x: ScoreInput) -> Score:
    text = f" {normalize(x.reply)} "
    hit = next((g for g in x.golds if normalize(g) and f" {normalize(g)} " in text), None)
    said = f"the reply contains {hit!r}" if hit is not None else "the reply contains none of the answers"
    return Score(float(hit is not None), said)


def f1(x: ScoreInput) -> Score:
    value = best_f1(x.answer, x.golds)
    return Score(value, f"token F1 of {x.answer!r} against the best answer: {value:.3f}")


def anls_score(x: ScoreInput) -> Score:
    value = anls(x.answer, x.golds)
    return Score(value, f"ANLS of {x.answer!r} against the best answer: {value:.3f}")


def choice_labels(choices: Any) -> dict[str, str]:
    """The task's choices as label -> text: a list is labelled A, B, C, ...; an object maps labels to texts."""
    if isinstance(choices, dict):
        return {_label(k): str(v) for k, v in choices.items()}
    return {LETTERS[i] if i < 26 else str(i + 1): str(c) for i, c in enumerate(choices or [])}


def _label(text: Any) -> str:
    """`(b)`, `b)`, `B.` and ` B ` all read as `B`."""
    return str(text).strip().strip("()[]").rstrip(".):").strip().upper()


def read_choice(answer: str, labels: dict[str, str]) -> str:
    """The label an answer names: a label itself, a choice's text, or a label as its first word; "" for none."""
    if _label(answer) in labels:
        return _label(answer)
    by_text = {normalize(t): k for k, t in labels.items()}
    if normalize(answer) in by_text:
        return by_text[normalize(answer)]
    first = answer.split()[0] if answer.split() else ""
    return _label(first) if _label(first) in labels else ""


def mcq(x: ScoreInput) -> Score:
    labels = choice_labels(x.task.get("choices"))
    got = read_choice(x.answer, labels)
    right = {read_choice(g, labels) or _label(g) for g in x.golds}
    if not got:
        return Score(0.0, f"{x.answer!r} names none of the choices {', '.join(labels)}; expected {sorted(right)}")
    return Score(float(got in right), f"chose {got}; the right choice is {' or '.join(sorted(right))}")


def parse_number(text: str) -> float | None:
    """The last number written in the text (thousands commas and a trailing % allowed), or None."""
    found = [m.group(0) for m in _NUMBER.finditer(text or "") if any(ch.isdigit() for ch in m.group(0))]
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def numeric(x: ScoreInput) -> Score:
    got = parse_number(x.answer)
    if got is None:
        return Score(0.0, f"{x.answer!r} holds no number; expected {x.golds}")
    for g in x.golds:
        want = parse_number(g)
        if want is not None and math.isclose(got, want, rel_tol=x.tolerance, abs_tol=x.tolerance if not want else 0):
            return Score(1.0, f"{got:g} equals {want:g} within a relative tolerance of {x.tolerance:g}")
    return Score(0.0, f"{got:g} is not any of {x.golds} within a relative tolerance of {x.tolerance:g}")


def regex(x: ScoreInput) -> Score:
    """Python's `re` syntax, matched by the `regex` package (the same syntax in its default version) because it can
    stop a match that runs too long: such a pattern makes the task Unscorable."""
    for pattern in x.golds:
        try:
            hit = _regex.search(pattern, x.answer, timeout=REGEX_TIMEOUT_S, concurrent=True)
        except TimeoutError:
            raise Unscorable(
                f"the answer pattern {pattern!r} did not finish matching a {len(x.answer)}-character answer within "
                f"{REGEX_TIMEOUT_S:g}s (catastrophic backtracking); rewrite it without nested repetition like (a+)+"
            ) from None
        if hit:
            return Score(1.0, f"{x.answer!r} matches the pattern {pattern!r}")
    return Score(0.0, f"{x.answer!r} matches none of the patterns {x.golds}")


SCORERS: dict[str, Callable[[ScoreInput], Score]] = {
    "exact_match": exact_match,
    "contains": contains,
    "f1": f1,
    "anls": anls_score,
    "mcq": mcq,
    "numeric": numeric,
    "regex": regex,
}
# scorers whose value is graded (soft); the others are right or wrong
GRADED = ("f1", "anls")


def check_patterns(golds: list[str], where: str) -> None:
    """Every regex answer compiles (in `re` and in the `regex` package that matches it); ValueError naming the task
    and the pattern otherwise."""
    for p in golds:
        try:
            re.compile(p)
            _regex.compile(p)
        except (re.error, _regex.error) as e:
            raise ValueError(f"{where}: answer {p!r} is not a valid regular expression ({e})") from None


def unscorable_answer(scorer: str, golds: list[str], task: JSONObject) -> str:
    """Why one of a task's answers can never be met by `scorer` ("" when each can): a numeric answer holding no
    number, an mcq answer naming none of the choices."""
    if scorer == "numeric":
        bad = next((g for g in golds if parse_number(g) is None), None)
        return f"answer {bad!r} holds no number, which scorer=numeric compares" if bad is not None else ""
    if scorer == "mcq" and task.get("choices"):
        labels = choice_labels(task.get("choices"))
        bad = next((g for g in golds if not read_choice(g, labels)), None)
        if bad is not None:
            return f"answer {bad!r} names none of the choices {', '.join(labels)} (give a label or a choice's text)"
    return ""
