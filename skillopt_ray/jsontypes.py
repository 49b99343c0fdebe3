"""JSON types of the product (defined beside the benchmarks' contract, which may import no engine module)."""

from skillopt_envs.jsontypes import JSONObject, JSONValue

__all__ = ["JSONObject", "JSONValue"]
