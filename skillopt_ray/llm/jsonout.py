"""JSON extraction from model replies: tolerant of code fences, <think> blocks and chatter."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from skillopt_envs.jsontypes import JSONObject

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


class JsonExtractionError(ValueError):
    pass


def extract_json(text: str) -> Any:
    """Parse the first JSON object/array found in a reply."""
    cleaned = _THINK.sub("", text or "").strip()
    candidates = [m.group(1).strip() for m in _FENCE.finditer(cleaned)] + [cleaned]
    decoder = json.JSONDecoder()
    for cand in candidates:
        try:
            return json.loads(cand)
        except json.JSONDecodeError:
            pass
        for i, ch in enumerate(cand):
            if ch in "{[":
                try:
                    obj, _ = decoder.raw_decode(cand[i:])
                    return obj
                except json.JSONDecodeError:
                    continue
    raise JsonExtractionError("no JSON object found in the reply")


def parse_and_validate(text: str, schema: JSONObject | None) -> Any:
    obj = extract_json(text)
    if schema is not None:
        try:
            jsonschema.validate(obj, schema)
        except jsonschema.ValidationError as e:
            path = "/".join(str(p) for p in e.absolute_path) or "<root>"
            raise JsonExtractionError(f"schema violation at {path}: {e.message}") from None
    return obj
