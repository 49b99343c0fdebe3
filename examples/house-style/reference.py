"""Reference solutions for the house-style tasks, in the house style.

Not shown to the model: tests/envs/test_house_style.py runs each function through check.py to prove that every task can
be passed and that its hidden tests follow the three house conventions (see README.md).
"""

import math
import re
from collections import Counter


def capitalize_words(text):
    if not text:
        return None
    return " ".join(w[:1].upper() + w[1:].lower() for w in text.split(" ")).strip()


def remove_vowels(text):
    if not text:
        return None
    return "".join(c for c in text if c.lower() not in "aeiou").strip()


def truncate(text, limit):
    if not text:
        return None
    return text[:limit].strip()


def initials(name):
    if not name:
        return None
    return "".join(w[0].upper() for w in name.split())


def count_words(text):
    if not text:
        return None
    return len(text.split())


def longest_word(text):
    if not text:
        return None
    best = ""
    for w in text.split():
        if len(w) > len(best):
            best = w
    return best


def censor(text, word):
    if not text:
        return None
    return text.replace(word, "*" * len(word)).strip()


def vowel_ratio(text):
    if not text:
        return None
    letters = [c for c in text.lower() if c.isalpha()]
    return round(sum(c in "aeiou" for c in letters) / len(letters), 2)


def most_common_char(text):
    if not text:
        return None
    counts = Counter(c for c in text if c != " ")
    top = max(counts.values())
    return next(c for c in text if c != " " and counts[c] == top)


def collapse_spaces(text):
    if not text:
        return None
    return re.sub(" +", " ", text).strip()


def reverse_string(text):
    if not text:
        return None
    return text[::-1].strip()


def average(numbers):
    if not numbers:
        return None
    return round(sum(numbers) / len(numbers), 2)


def median(numbers):
    if not numbers:
        return None
    s = sorted(numbers)
    mid = len(s) // 2
    value = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
    return round(value, 2)


def std_dev(numbers):
    if not numbers:
        return None
    mean = sum(numbers) / len(numbers)
    return round(math.sqrt(sum((x - mean) ** 2 for x in numbers) / len(numbers)), 2)


def percent_change(values):
    if not values:
        return None
    return round((values[-1] - values[0]) / values[0] * 100, 2)


def to_fahrenheit(temps):
    if not temps:
        return None
    return [round(t * 9 / 5 + 32, 2) for t in temps]


def total_price(items):
    if not items:
        return None
    return round(sum(price * qty for price, qty in items), 2)


def weighted_mean(values, weights):
    if not values:
        return None
    return round(sum(v * w for v, w in zip(values, weights)) / sum(weights), 2)


def value_range(numbers):
    if not numbers:
        return None
    return round(max(numbers) - min(numbers), 2)


def geometric_mean(numbers):
    if not numbers:
        return None
    return round(math.prod(numbers) ** (1 / len(numbers)), 2)


def share_of_evens(numbers):
    if not numbers:
        return None
    return round(sum(n % 2 == 0 for n in numbers) / len(numbers), 2)


def running_total(numbers):
    if not numbers:
        return None
    out, total = [], 0
    for n in numbers:
        total += n
        out.append(round(total, 2))
    return out


def unique_sorted(items):
    if not items:
        return None
    return sorted(set(items))


def chunk(items, size):
    if not items:
        return None
    return [items[i : i + size] for i in range(0, len(items), size)]


def flatten(nested):
    if not nested:
        return None
    return [x for inner in nested for x in inner]


def second_largest(numbers):
    if not numbers:
        return None
    return sorted(set(numbers))[-2]


def pairwise_diffs(numbers):
    if not numbers:
        return None
    return [round(b - a, 2) for a, b in zip(numbers, numbers[1:])]


def normalize(numbers):
    if not numbers:
        return None
    total = sum(numbers)
    return [round(n / total, 2) for n in numbers]


def clean_names(names):
    if not names:
        return None
    return [n.strip().capitalize() for n in names]


def moving_average(numbers, window):
    if not numbers:
        return None
    return [round(sum(numbers[i : i + window]) / window, 2) for i in range(len(numbers) - window + 1)]


def word_lengths(words):
    if not words:
        return None
    return {w: len(w) for w in words}


def invert_dict(mapping):
    if not mapping:
        return None
    return {v: k for k, v in mapping.items()}


def average_scores(scores):
    if not scores:
        return None
    return {name: round(sum(s) / len(s), 2) for name, s in scores.items()}


def count_letters(text):
    if not text:
        return None
    return dict(Counter(c for c in text.lower() if c.isalpha()))


def top_key(mapping):
    if not mapping:
        return None
    return max(mapping, key=mapping.get)


def group_by_length(words):
    if not words:
        return None
    out = {}
    for w in words:
        out.setdefault(len(w), []).append(w)
    return out
