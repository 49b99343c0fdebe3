"""Built-in LiveMathematicianBench-format sample items, generated on first use (no download).

They are small number-theory and combinatorics questions, computed here so that each answer is right by
construction, written as the upstream raw rows are (`qa_<month>_final.json`: no, paper_link, theorem, sketch,
theorem_type, mcq {question, choices, correct_choice}) with four choices each. The choices come in the layouts the
raw files use (a list of {label, text}, a {label: text} dict, a plain list) and the correct choice as a dict or a
bare label, so the normaliser is exercised as on real data. A manifest in `splits/` picks the train/val/test ids.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from skillopt_envs.kit import ensure_samples as made_once
from skillopt_envs.kit import samples_root

MADE_BY = (
    "skillopt_ray skillopt_envs.livemathematicianbench.samples"  # the sample folder's COMPLETE marker says who wrote it
)

MONTHS = ("209901", "209902")  # not real months: sample ids can never be mistaken for upstream ones
SPLIT_SIZES = {"train": 8, "val": 4, "test": 6}
VERSION = "v1"


def _divisors(n: int) -> int:
    return sum(2 if d * d != n else 1 for d in range(1, math.isqrt(n) + 1) if n % d == 0)


def _q_divisors(rng: random.Random) -> tuple[str, list[str], int, str, str, str]:
    p, q = rng.sample([2, 3, 5, 7], 2)
    a, b = rng.randint(1, 4), rng.randint(1, 3)
    n = p**a * q**b
    right = (a + 1) * (b + 1)
    wrong = [a * b, (a + 1) * b + 1, a + b + 2, right + 2, right - 1]
    return (
        f"How many positive divisors does n = {p}^{a} * {q}^{b} = {n} have?",
        _options(str(right), [str(w) for w in wrong if w != right and w > 0]),
        0,
        "counting",
        f"The number of divisors of p^a q^b with distinct primes p, q is (a+1)(b+1); here it is {right}.",
        "Each divisor is p^i q^j with 0 <= i <= a and 0 <= j <= b, and distinct pairs give distinct divisors.",
    )


def _q_gcd(rng: random.Random) -> tuple[str, list[str], int, str, str, str]:
    g = rng.choice([3, 4, 6, 7, 9])
    x, y = rng.sample([5, 7, 8, 11, 13], 2)
    a, b = g * x, g * y
    right = math.gcd(a, b)
    wrong = [right * 2, a * b // right, right + 1, max(1, right - 2), x * y]
    return (
        f"What is the greatest common divisor of {a} and {b}?",
        _options(str(right), [str(w) for w in wrong if w != right]),
        0,
        "computation",
        f"gcd({a}, {b}) = {right}.",
        "Run the Euclidean algorithm: gcd(a, b) = gcd(b, a mod b) until the remainder is 0.",
    )


def _q_primes(rng: random.Random) -> tuple[str, list[str], int, str, str, str]:
    m = rng.choice([24, 12])
    stronger = {24: 48, 12: 24}[m]
    return (
        "Which statement about every prime p > 3 is true?",
        _options(
            f"p^2 - 1 is divisible by {m} for every such p",
            [
                f"p^2 - 1 is divisible by {stronger} for every such p",
                f"p^2 - 1 is divisible by {m} for some, but not all, such p",
                "p + 1 is divisible by 6 for every such p",
            ],
        ),
        0,
        "implication",
        "For every prime p > 3, 24 divides p^2 - 1.",
        "p is odd and not a multiple of 3, so (p-1)(p+1) is a product of consecutive even numbers (divisible by 8) "
        "and one of p-1, p+1 is a multiple of 3.",
    )


def _q_power(rng: random.Random) -> tuple[str, list[str], int, str, str, str]:
    n = rng.randint(100, 5000)
    k = n.bit_length()  # smallest k with 2^k > n
    return (
        f"What is the smallest integer k >= 1 such that 2^k > {n}?",
        _options(str(k), [str(k - 1), str(k + 1), str(k + 2)]),
        0,
        "extremal",
        f"2^{k - 1} <= {n} < 2^{k}.",
        f"Compare {n} with consecutive powers of two.",
    )


def _q_residue(rng: random.Random) -> tuple[str, list[str], int, str, str, str]:
    a, e, m = rng.choice([2, 3, 5]), rng.randint(10, 40), rng.choice([7, 11, 13])
    right = pow(a, e, m)
    wrong = [(right + d) % m for d in (1, 2, 3, m - 1)]
    return (
        f"What is the remainder of {a}^{e} when divided by {m}?",
        _options(str(right), [str(w) for w in wrong if w != right]),
        0,
        "computation",
        f"{a}^{e} is congruent to {right} modulo {m}.",
        f"By Fermat's little theorem {a}^{m - 1} is 1 modulo {m}; reduce the exponent modulo {m - 1}.",
    )


def _q_equivalence(rng: random.Random) -> tuple[str, list[str], int, str, str, str]:
    n = rng.choice([2, 3, 5])
    return (
        f"For an integer a, which statement about a^2 modulo {n} is correct?",
        _options(
            f"{n} divides a^2 if and only if {n} divides a",
            [
                f"{n} divides a^2 if {n} divides a, but the converse fails for some a",
                f"{n} divides a^2 for every odd a",
                f"{n}^2 divides a whenever {n} divides a^2",
            ],
        ),
        0,
        "equivalence",
        f"Since {n} is prime, {n} | a^2 holds exactly when {n} | a.",
        "Euclid's lemma: a prime dividing a product divides a factor; the other direction is immediate.",
    )


Maker = Callable[[random.Random], tuple[str, list[str], int, str, str, str]]
MAKERS: tuple[Maker, ...] = (_q_divisors, _q_gcd, _q_primes, _q_power, _q_residue, _q_equivalence)


def _options(right: str, wrong: list[str]) -> list[str]:
    """The right option first, then the first three distinct wrong ones (the caller shuffles)."""
    out = [right]
    for w in wrong:
        if w not in out:
            out.append(w)
        if len(out) == 4:
            break
    if len(out) < 4:
        raise ValueError(f"sample generator made fewer than four distinct options: {out}")
    return out


def _raw_choices(texts: list[str], correct: int, style: int) -> tuple[Any, Any]:
    """The choices and the correct choice in one of the raw layouts."""
    labels = "ABCD"
    if style == 0:
        return [{"label": labels[i], "text": t} for i, t in enumerate(texts)], {
            "label": labels[correct],
            "text": texts[correct],
        }
    if style == 1:
        return {labels[i]: t for i, t in enumerate(texts)}, f"{labels[correct].lower()}."
    return list(texts), labels[correct]


def make_rows(seed: int = 7) -> dict[str, list[dict[str, Any]]]:
    """Raw rows by month; each row's `no` counts from 1 within its month."""
    rng = random.Random(seed)
    n_items = sum(SPLIT_SIZES.values())
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in MONTHS}
    for i in range(n_items):
        question, options, _, kind, theorem, sketch = MAKERS[i % len(MAKERS)](rng)
        order = list(range(4))
        rng.shuffle(order)
        texts = [options[j] for j in order]
        choices, correct = _raw_choices(texts, order.index(0), i % 3)
        month = MONTHS[i % len(MONTHS)]
        rows[month].append(
            {
                "no": len(rows[month]) + 1,
                "paper_link": "",
                "theorem": theorem,
                "sketch": sketch,
                "theorem_type": [kind],
                "mcq": {"question": question, "choices": choices, "correct_choice": correct},
            }
        )
    return rows


def sample_manifest(rows: dict[str, list[dict[str, Any]]], seed: int = 7) -> dict[str, list[dict[str, Any]]]:
    entries = [
        {"id": f"{m}:{r['no']}", "month": m, "no": r["no"], "source_file": f"data/{m}/qa_{m}_final.json"}
        for m in MONTHS
        for r in rows[m]
    ]
    random.Random(seed).shuffle(entries)
    out, start = {}, 0
    for split, n in SPLIT_SIZES.items():
        out[split], start = entries[start : start + n], start + n
    return out


def ensure_samples(sample_dir: Optional[str] = None) -> Path:
    """The sample folder (data/<month>/qa_<month>_final.json and splits/<split>/items.json), made once."""
    root = samples_root(sample_dir, f"livemathematicianbench_samples_{VERSION}")
    return made_once(root, _write, MADE_BY)


def _write(tmp: Path) -> None:
    rows = make_rows()
    for month, month_rows in rows.items():
        (tmp / "data" / month).mkdir(parents=True)
        (tmp / "data" / month / f"qa_{month}_final.json").write_text(json.dumps(month_rows, indent=1))
    for split, entries in sample_manifest(rows).items():
        (tmp / "splits" / split).mkdir(parents=True)
        (tmp / "splits" / split / "items.json").write_text(json.dumps(entries, indent=1))
