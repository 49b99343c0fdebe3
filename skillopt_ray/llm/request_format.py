"""The `response_format` a structured-output call sends, and a schema bounded for constrained decoding."""

from __future__ import annotations

from typing import Any, Optional

from skillopt_envs.chat import ResponseFormat
from skillopt_envs.jsontypes import JSONObject


def response_format(mode: str, schema: JSONObject, name: str) -> Optional[ResponseFormat]:
    """The `response_format` a role's structured-output mode asks for (None: free text)."""
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
    if mode == "json_object":
        return {"type": "json_object"}
    return None


def bounded_schema(schema: Any, max_items: Optional[int], max_chars: Optional[int]) -> Any:
    """A copy of `schema` whose arrays hold at most `max_items` and whose strings at most `max_chars` characters
    (existing tighter bounds kept), for constrained decoding; the reply is still validated against `schema`."""
    if isinstance(schema, list):
        return [bounded_schema(s, max_items, max_chars) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded_schema(v, max_items, max_chars) for k, v in schema.items()}
    if out.get("type") == "array" and max_items:
        out["maxItems"] = min(max_items, out.get("maxItems", max_items))
    if out.get("type") == "string" and max_chars and "enum" not in out:
        out["maxLength"] = min(max_chars, out.get("maxLength", max_chars))
    return out
