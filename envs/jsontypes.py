"""JSON as the product writes it: null, a boolean, a number, a string, a list of values or an object of values.

A payload typed `JSONObject` instead of a dict of anything lets mypy refuse a value `json.dumps` cannot write
(a set, a dataclass, a Path). Nested lists and objects are read-only (Sequence, Mapping) so that a `list[str]` or a
`dict[str, int]` already built is a JSON value as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias, Union

JSONValue: TypeAlias = Union[None, bool, int, float, str, Sequence["JSONValue"], Mapping[str, "JSONValue"]]
JSONObject: TypeAlias = dict[str, JSONValue]


def as_object(value: object) -> JSONObject:
    """`value` when it is a JSON object, else {}: how a reader of JSON it did not write (a session log, a wire
    body) walks into an object that may hold anything."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[JSONValue]:
    """`value` when it is a JSON array, else []."""
    return value if isinstance(value, list) else []


def as_int(value: object) -> int:
    """`value` as a whole number when it is one (a number, or digits in a string), else 0."""
    if isinstance(value, (int, float)) and value == value and abs(value) != float("inf"):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return 0
    return 0
