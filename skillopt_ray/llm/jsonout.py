"""A reply's JSON checked against the schema a call asked for (the tolerant reader itself is the benchmarks'
contract's: skillopt_envs.chat.extract_json)."""

from __future__ import annotations

from typing import Any

from skillopt_envs.chat import JsonExtractionError, extract_json
from skillopt_envs.jsontypes import JSONObject


def parse_and_validate(text: str, schema: JSONObject | None) -> Any:
    obj = extract_json(text)
    if schema is not None:
        import jsonschema  # 0.03-0.05 s to import: only calls that ask for a schema pay it (never a chat eval's start)

        try:
            jsonschema.validate(obj, schema)
        except jsonschema.ValidationError as e:
            path = "/".join(str(p) for p in e.absolute_path) or "<root>"
            raise JsonExtractionError(f"schema violation at {path}: {e.message}") from None
    return obj
