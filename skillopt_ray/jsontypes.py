"""JSON as the product writes it: null, a boolean, a number, a string, a list of values or an object of values.

A payload typed `JSONObject` instead of a dict of anything lets mypy refuse a value `json.dumps` cannot write
(a set, a dataclass, a Path). Parameters that only read JSON take the covariant `JSONMap`, so a `dict[str, int]`
is accepted where a JSON object is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias, Union

JSONValue: TypeAlias = Union[None, bool, int, float, str, list["JSONValue"], dict[str, "JSONValue"]]
JSONObject: TypeAlias = dict[str, JSONValue]
JSONLike: TypeAlias = Union[None, bool, int, float, str, Sequence["JSONLike"], Mapping[str, "JSONLike"]]
JSONMap: TypeAlias = Mapping[str, JSONLike]
