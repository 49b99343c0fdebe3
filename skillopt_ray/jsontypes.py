"""JSON value types for the engine: the same ones the benchmarks' contract defines (skillopt_envs.jsontypes), so a
record an env writes and one the engine writes are checked alike."""

from skillopt_envs.jsontypes import JSONObject, JSONValue

__all__ = ["JSONObject", "JSONValue"]
