"""Writes tasks.jsonl: 36 small Python functions whose hidden tests also check three house conventions.

The prompts describe each function's behaviour on ordinary input only. The hidden tests of every task also expect
the house conventions, which no prompt states (README.md):
  1. an empty first argument ("" or [] or {}) returns None instead of raising or returning an empty or zero value;
  2. every float in a result is rounded to 2 decimals;
  3. every string in a result has no leading or trailing whitespace.
Rerun after editing the list below (the split is fixed by the experiment's split_seed: do not change tasks after
seeing test results): python examples/house-style/make_tasks.py
"""

import json
from pathlib import Path

S, N, L, D = "strings", "numbers", "lists", "dicts"

# (function and id, task type, what the prompt asks for, hidden tests as [args, expected])
TASKS = [
    ("capitalize_words", S, "`capitalize_words(text)` that upper-cases the first letter of every word in `text` and "
     "lower-cases the rest of each word",
     [[["hello world"], "Hello World"], [["  mIxEd CASE "], "Mixed Case"], [[""], None]]),
    ("remove_vowels", S, "`remove_vowels(text)` that returns `text` with every vowel (a, e, i, o, u, in either "
     "case) removed", [[["banana"], "bnn"], [[" Apple pie "], "ppl p"], [["rhythm"], "rhythm"], [[""], None]]),
    ("truncate", S, "`truncate(text, limit)` that returns the first `limit` characters of `text`",
     [[["hello world", 6], "hello"], [["short", 10], "short"], [["abcdef", 3], "abc"], [["", 3], None]]),
    ("initials", S, "`initials(name)` that returns the upper-cased first letter of each word of `name`, joined "
     "without separators", [[["ada lovelace"], "AL"], [["grace brewster hopper"], "GBH"], [[""], None]]),
    ("count_words", S, "`count_words(text)` that returns how many whitespace-separated words `text` contains",
     [[["one two three"], 3], [["  a  b "], 2], [[""], None]]),
    ("longest_word", S, "`longest_word(text)` that returns the longest whitespace-separated word of `text` (the "
     "first one if several are equally long)", [[["a quick brown fox"], "quick"], [["hi yo"], "hi"], [[""], None]]),
    ("censor", S, "`censor(text, word)` that replaces every occurrence of `word` in `text` with as many asterisks "
     "as `word` has characters", [[["the cat sat", "cat"], "the *** sat"], [[" cat ", "cat"], "***"],
                                  [["", "x"], None]]),
    ("vowel_ratio", S, "`vowel_ratio(text)` that returns the share of the letters in `text` that are vowels "
     "(a, e, i, o, u, in either case)", [[["banana"], 0.5], [["sky"], 0.0], [["abc"], 0.33], [[""], None]]),
    ("most_common_char", S, "`most_common_char(text)` that returns the character other than a space that occurs "
     "most often in `text` (the one seen first if several tie)",
     [[["hello"], "l"], [["a bb a"], "a"], [[""], None]]),
    ("collapse_spaces", S, "`collapse_spaces(text)` that replaces every run of spaces in `text` with a single space",
     [[["a   b"], "a b"], [["  lead and  trail  "], "lead and trail"], [[""], None]]),
    ("reverse_string", S, "`reverse_string(text)` that returns `text` reversed",
     [[["abc"], "cba"], [[" stressed"], "desserts"], [[""], None]]),
    ("average", N, "`average(numbers)` that returns the arithmetic mean of the list `numbers`",
     [[[[1, 2, 3, 4]], 2.5], [[[1, 2, 2]], 1.67], [[[10]], 10], [[[]], None]]),
    ("median", N, "`median(numbers)` that returns the median of the list `numbers` (the mean of the two middle "
     "values when there is an even count)", [[[[3, 1, 2]], 2], [[[1, 2, 3, 4]], 2.5], [[[1.234, 5.678]], 3.46],
                                               [[[]], None]]),
    ("std_dev", N, "`std_dev(numbers)` that returns the population standard deviation of the list `numbers`",
     [[[[2, 4, 4, 4, 5, 5, 7, 9]], 2.0], [[[1, 2, 3]], 0.82], [[[]], None]]),
    ("percent_change", N, "`percent_change(values)` that returns the percentage change from the first to the last "
     "value of the list `values`", [[[[50, 75]], 50.0], [[[3, 5, 4]], 33.33], [[[]], None]]),
    ("to_fahrenheit", N, "`to_fahrenheit(temps)` that converts every Celsius temperature in the list `temps` to "
     "Fahrenheit and returns the list of results", [[[[0, 100]], [32.0, 212.0]], [[[36.6, 21.3]], [97.88, 70.34]],
                                                   [[[]], None]]),
    ("total_price", N, "`total_price(items)` that takes a list of `[price, quantity]` pairs and returns the total "
     "cost", [[[[[2, 3], [1, 1]]], 7], [[[[1.5, 2], [0.333, 3]]], 4.0], [[[[0.1, 3]]], 0.3], [[[]], None]]),
    ("weighted_mean", N, "`weighted_mean(values, weights)` that returns the mean of `values` weighted by the "
     "matching entries of `weights`", [[[[1, 2, 3], [1, 1, 1]], 2.0], [[[1, 2], [1, 2]], 1.67], [[[], []], None]]),
    ("value_range", N, "`value_range(numbers)` that returns the largest value of the list `numbers` minus the "
     "smallest", [[[[3, 9, 1]], 8], [[[0.1, 0.3]], 0.2], [[[]], None]]),
    ("geometric_mean", N, "`geometric_mean(numbers)` that returns the geometric mean of the list of positive "
     "numbers `numbers`", [[[[2, 8]], 4.0], [[[1, 2, 3]], 1.82], [[[]], None]]),
    ("share_of_evens", N, "`share_of_evens(numbers)` that returns the fraction of the integers in the list "
     "`numbers` that are even", [[[[1, 2, 3, 4]], 0.5], [[[1, 2, 4]], 0.67], [[[]], None]]),
    ("running_total", L, "`running_total(numbers)` that returns the list of cumulative sums of the list `numbers`",
     [[[[1, 2, 3]], [1, 3, 6]], [[[0.1, 0.2, 0.3]], [0.1, 0.3, 0.6]], [[[]], None]]),
    ("unique_sorted", L, "`unique_sorted(items)` that returns the distinct values of the list `items` in ascending "
     "order", [[[[3, 1, 3, 2]], [1, 2, 3]], [[["b", "a", "b"]], ["a", "b"]], [[[]], None]]),
    ("chunk", L, "`chunk(items, size)` that splits the list `items` into consecutive lists of `size` elements (the "
     "last one may be shorter)", [[[[1, 2, 3, 4, 5], 2], [[1, 2], [3, 4], [5]]], [[[1, 2], 5], [[1, 2]]],
                                  [[[], 3], None]]),
    ("flatten", L, "`flatten(nested)` that concatenates the lists inside the list `nested` into one list",
     [[[[[1, 2], [3], []]], [1, 2, 3]], [[[["a"], ["b", "c"]]], ["a", "b", "c"]], [[[]], None]]),
    ("second_largest", L, "`second_largest(numbers)` that returns the second largest distinct value of the list "
     "`numbers`", [[[[4, 1, 3]], 3], [[[5, 5, 2]], 2], [[[]], None]]),
    ("pairwise_diffs", L, "`pairwise_diffs(numbers)` that returns the list of differences between each element of "
     "`numbers` and the one before it", [[[[1, 4, 9]], [3, 5]], [[[1.1, 2.2, 3.3]], [1.1, 1.1]], [[[]], None]]),
    ("normalize", L, "`normalize(numbers)` that divides every value of the list `numbers` by their sum and returns "
     "the new list", [[[[1, 1, 2]], [0.25, 0.25, 0.5]], [[[1, 2]], [0.33, 0.67]], [[[]], None]]),
    ("clean_names", L, "`clean_names(names)` that returns the list `names` with each name's first letter "
     "upper-cased and the rest lower-cased", [[[["alice", "BOB"]], ["Alice", "Bob"]],
                                              [[[" carol", "dave  "]], ["Carol", "Dave"]], [[[]], None]]),
    ("moving_average", L, "`moving_average(numbers, window)` that returns the means of every run of `window` "
     "consecutive values of the list `numbers`, in order", [[[[1, 2, 3, 4], 2], [1.5, 2.5, 3.5]],
                                                           [[[1, 2, 4], 3], [2.33]], [[[], 2], None]]),
    ("word_lengths", D, "`word_lengths(words)` that returns a dict mapping each word of the list `words` to its "
     "length", [[[["hi", "there"]], {"hi": 2, "there": 5}], [[["a"]], {"a": 1}], [[[]], None]]),
    ("invert_dict", D, "`invert_dict(mapping)` that returns a dict mapping each value of `mapping` to its key",
     [[[{"a": "x", "b": "y"}], {"x": "a", "y": "b"}], [[{"k": "v"}], {"v": "k"}], [[{}], None]]),
    ("average_scores", D, "`average_scores(scores)` that takes a dict mapping names to lists of scores and returns a "
     "dict mapping each name to the mean of its scores", [[[{"ann": [90, 85], "bo": [70]}], {"ann": 87.5, "bo": 70}],
                                                          [[{"cy": [1, 2, 2]}], {"cy": 1.67}], [[{}], None]]),
    ("count_letters", D, "`count_letters(text)` that returns a dict mapping each letter in `text`, lower-cased, to "
     "how many times it occurs (other characters are not counted)", [[["Aab"], {"a": 2, "b": 1}],
                                                                      [["x-y X"], {"x": 2, "y": 1}], [[""], None]]),
    ("top_key", D, "`top_key(mapping)` that returns the key of the dict `mapping` whose value is largest",
     [[[{"a": 3, "b": 7}], "b"], [[{"only": 1}], "only"], [[{}], None]]),
    ("group_by_length", D, "`group_by_length(words)` that returns a dict mapping each word length to the list of "
     "the words of `words` with that length, in their original order",
     [[[["a", "bb", "cc"]], {"1": ["a"], "2": ["bb", "cc"]}], [[["dog", "cat"]], {"3": ["dog", "cat"]}],
      [[[]], None]]),
]  # fmt: skip


def main() -> None:
    out = Path(__file__).with_name("tasks.jsonl")
    with out.open("w", encoding="utf-8") as f:
        for name, kind, what, tests in TASKS:
            row = {
                "id": name,
                "prompt": f"Write a Python function {what}.",
                "metadata": {"task_type": kind, "function": name, "tests": tests},
            }
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(TASKS)} tasks to {out}")


if __name__ == "__main__":
    main()
