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
