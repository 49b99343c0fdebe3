"""Tool calls a small model writes as text, recovered into real calls when they are unambiguous.

A small local model offered tools often answers with the call in its message text: a fenced JSON object, a bare
JSON object, or its template's `<tool_call>` tags that the server did not parse. An agent CLI then sees a final
answer and stops. We turn such text into a tool call only when it names one of the tools the request offered and
its arguments fit that tool's parameters (required keys present, no unknown keys where none are allowed, JSON
types right); anything else stays the final text, so an invented tool never reaches the agent as a call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Optional

from skillopt_envs.chat import ToolSpec
from skillopt_envs.jsontypes import JSONObject, JSONValue

from skillopt_ray.llm.wire import FlatToolCall

_FENCED = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass(frozen=True)
class TextCall:
    """One call recovered from the text: the tool's name and its arguments as JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True)
class Recovered:
    calls: list[TextCall]
    content: str  # the text left once the calls are taken out


def recover_calls(content: str, tools: list[ToolSpec]) -> Optional[Recovered]:
    """The calls written in `content` to tools the request offered, or None when there is no valid one."""
    if not content or not tools:
        return None
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools if t.get("function")}
    for spans in (_blocks(_TAGGED, content), _blocks(_FENCED, content), _bare(content)):
        calls = [c for c in (_call_of(text, schemas) for _, text in spans) if c is not None]
        if calls and len(calls) == len(spans):
            rest = content
            for whole, _ in spans:
                rest = rest.replace(whole, "", 1)
            return Recovered(calls, rest.strip())
    return None


def _blocks(pattern: re.Pattern[str], content: str) -> list[tuple[str, str]]:
    return [(m.group(0), m.group(1)) for m in pattern.finditer(content)]


def _bare(content: str) -> list[tuple[str, str]]:
    """The whole reply when it is one JSON object and nothing else."""
    text = content.strip()
    return [(text, text)] if text.startswith("{") and text.endswith("}") else []


def _call_of(text: str, schemas: dict[str, JSONObject]) -> Optional[TextCall]:
    obj = _json_object(text)
    if obj is None:
        return None
    fn = obj.get("function")
    if isinstance(fn, dict):  # {"type": "function", "function": {"name", "arguments"}}
        obj = fn
    name = obj.get("name", obj.get("tool"))
    if not isinstance(name, str) or name not in schemas:
        return None
    args: Any = next((obj[k] for k in ("arguments", "parameters", "args", "input") if k in obj), {})
    if isinstance(args, str):
        args = _json_object(args)
    if not isinstance(args, dict) or not fits(args, schemas[name]):
        return None
    return TextCall(name, json.dumps(args, ensure_ascii=False))


def _json_object(text: str) -> Optional[JSONObject]:
    """The first JSON object in `text` (trailing text after it ignored), or None."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        val, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return val if isinstance(val, dict) else None


def fits(args: JSONObject, schema: JSONObject) -> bool:
    """`args` has every required key, no key the schema forbids, and the declared JSON type for each known key."""
    found = schema.get("properties")
    props = found if isinstance(found, dict) else {}
    required = schema.get("required")
    if any(k not in args for k in (required if isinstance(required, list) else [])):
        return False
    if schema.get("additionalProperties") is False and any(k not in props for k in args):
        return False
    return all(_typed(args[k], p) for k in args if k in props and isinstance(p := props[k], dict))


def _typed(value: JSONValue, prop: JSONObject) -> bool:
    declared = prop.get("type")
    if declared is None:
        return True
    kinds = declared if isinstance(declared, list) else [declared]
    for kind in kinds:
        ok = _TYPES.get(kind) if isinstance(kind, str) else None
        if ok is None:
            return True  # a type we do not know: not ours to refuse
        if isinstance(value, ok) and not (kind in ("integer", "number") and isinstance(value, bool)):
            return True
    return False


def repair_arguments(arguments: str) -> str:
    """A real tool call's arguments as valid JSON when the model added text after the object; else unchanged."""
    try:
        json.loads(arguments or "{}")
        return arguments
    except ValueError:
        obj = _json_object(arguments)
        return json.dumps(obj, ensure_ascii=False) if obj is not None else arguments


def settle_reply(reply: Any, tools: list[ToolSpec]) -> Any:
    """An agent reply (llm/agent_api.AgentReply) with its tool calls' arguments repaired and, when it made no call
    although tools were offered, the calls its text wrote recovered (their ids are given by the caller)."""
    calls = [dict(c, arguments=repair_arguments(c.get("arguments") or "")) for c in reply.tool_calls]
    if not calls and tools:
        got = recover_calls(reply.content, tools)
        if got is not None:
            found: list[FlatToolCall] = [{"id": "", "name": c.name, "arguments": c.arguments} for c in got.calls]
            return replace(reply, content=got.content, tool_calls=found)
    return replace(reply, tool_calls=calls)
