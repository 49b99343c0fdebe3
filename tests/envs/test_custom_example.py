"""The worked example in examples/python-functions: its 20 tasks load as `+experiment=custom` reads them, its check
passes a right function for every task and scores a wrong one below 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import skillopt_envs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python-functions"

SOLUTIONS = {
    "slugify": "import re\ndef slugify(t):\n    return re.sub(r'[^a-z0-9]+', '-', t.lower()).strip('-')",
    "count_vowels": "def count_vowels(t):\n    return sum(c in 'aeiouAEIOU' for c in t)",
    "reverse_words": "def reverse_words(s):\n    return ' '.join(reversed(s.split()))",
    "is_palindrome": "def is_palindrome(t):\n    s = [c.lower() for c in t if c.isalnum()]\n    return s == s[::-1]",
    "title_case": "def title_case(t):\n    return ' '.join(w[:1].upper() + w[1:].lower() for w in t.split(' '))",
    "caesar": (
        "def caesar(t, k):\n    out = ''\n    for c in t:\n        if c.isascii() and c.isalpha():\n"
        "            b = ord('a') if c.islower() else ord('A')\n            c = chr((ord(c) - b + k) % 26 + b)\n"
        "        out += c\n    return out"
    ),
    "running_sum": "from itertools import accumulate\ndef running_sum(n):\n    return list(accumulate(n))",
    "dedupe": "def dedupe(xs):\n    return list(dict.fromkeys(xs))",
    "chunk": "def chunk(xs, n):\n    return [xs[i:i + n] for i in range(0, len(xs), n)]",
    "flatten": (
        "def flatten(x):\n    out = []\n    for v in x:\n        out += flatten(v) if isinstance(v, list) else [v]\n"
        "    return out"
    ),
    "second_largest": "def second_largest(n):\n    s = sorted(set(n))\n    return s[-2] if len(s) > 1 else None",
    "rotate": "def rotate(xs, k):\n    if not xs:\n        return []\n    k %= len(xs)\n    return xs[-k:] + xs[:-k] if k else list(xs)",
    "word_counts": (
        "import re\nfrom collections import Counter\ndef word_counts(t):\n"
        "    return dict(Counter(w.lower() for w in re.findall('[A-Za-z]+', t)))"
    ),
    "invert": (
        "def invert(m):\n    out = {}\n    for k, v in m.items():\n        out.setdefault(v, []).append(k)\n"
        "    return {v: sorted(ks) for v, ks in out.items()}"
    ),
    "merge_counts": "def merge_counts(a, b):\n    out = dict(a)\n    for k, v in b.items():\n        out[k] = out.get(k, 0) + v\n    return out",
    "gcd": "import math\ndef gcd(a, b):\n    return math.gcd(a, b)",
    "is_prime": "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))",
    "digit_sum": "def digit_sum(n):\n    return sum(map(int, str(abs(n))))",
    "fizzbuzz": (
        "def fizzbuzz(n):\n    return ['FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0"
        " else str(i) for i in range(1, n + 1)]"
    ),
    "mean": "def mean(n):\n    return sum(n) / len(n) if n else None",
}


def tasks() -> list[dict]:
    return [json.loads(line) for line in (EXAMPLE / "tasks.jsonl").read_text().splitlines() if line.strip()]


def run_check(tmp_path: Path, task: dict, reply: str) -> list[str]:
    (tmp_path / "task.json").write_text(json.dumps(task))
    (tmp_path / "reply.txt").write_text(reply)
    p = subprocess.run(
        [sys.executable, str(EXAMPLE / "check.py"), str(tmp_path / "task.json"), str(tmp_path / "reply.txt")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return p.stdout.strip().splitlines()


def test_the_example_loads_as_the_custom_benchmark_reads_it():
    b = skillopt_envs.make(
        "custom",
        {"data_dir": str(EXAMPLE / "tasks.jsonl"), "options": {"scorer": "script", "check": str(EXAMPLE / "check.py")}},
    )
    b.preflight(["train", "val", "test"])
    assert [len(b.load_split(s)) for s in ("train", "val", "test")] == [4, 2, 14]
    assert len(tasks()) == 20 and {t["metadata"]["function"] for t in tasks()} == set(SOLUTIONS)


@pytest.mark.parametrize("task", tasks(), ids=lambda t: t["id"])
def test_the_check_passes_a_right_function_and_fails_a_wrong_one(tmp_path, task):
    fn = task["metadata"]["function"]
    assert run_check(tmp_path, task, f"Here:\n```python\n{SOLUTIONS[fn]}\n```\n")[-1] == "1.0"
    wrong = run_check(tmp_path, task, f"```python\ndef {fn}(*args):\n    return 'nope'\n```")
    assert float(wrong[-1]) < 1.0 and wrong[0].startswith("FAIL")
