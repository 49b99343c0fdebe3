"""Bounds written into the structured-output schema for small models (llm.<role>.schema_max_items/chars):
sent to the endpoint, never applied to the validation of the reply; off by default."""

from __future__ import annotations

import json

from skillopt_ray import prompts
from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway, bounded_schema


def _gateway(**role_kw) -> Gateway:
    role = LLMRoleConfig(provider="openai", model="m", base_url="http://127.0.0.1:9/v1", **role_kw)
    return Gateway(
        LLMConfig(
            backend="compatible",
            target=LLMRoleConfig(provider="openai", model="m", base_url="http://127.0.0.1:9/v1"),
            optimizer=role,
        ),
        None,
    )


def test_every_array_and_string_of_the_analyst_schema_gets_its_bound():
    schema = prompts.analyst_schema("failure", "patch", notes=True)
    out = bounded_schema(schema, 4, 400)
    edits = out["properties"]["patch"]["properties"]["edits"]
    assert edits["maxItems"] == 4 and edits["items"]["properties"]["content"]["maxLength"] == 400
    assert (
        out["properties"]["failure_summary"]["maxItems"] == 4 and out["properties"]["appendix_notes"]["maxItems"] == 4
    )
    assert out["properties"]["batch_size"] == {"type": "integer"}  # other types untouched
    assert "maxItems" not in json.dumps(schema)  # the original (used to validate the reply) is unchanged
    tight = bounded_schema({"type": "array", "maxItems": 2, "items": {"type": "string", "enum": ["a", "b"]}}, 4, 400)
    assert tight == {"type": "array", "maxItems": 2, "items": {"type": "string", "enum": ["a", "b"]}}


def test_bounds_reach_the_request_only_when_the_role_sets_them():
    schema = prompts.analyst_schema("success", "patch", notes=False)
    plain = _gateway().response_format_for("optimizer", schema, "analysis")
    assert plain["json_schema"]["schema"] == schema
    bounded = _gateway(schema_max_items=3, schema_max_chars=200).response_format_for("optimizer", schema, "analysis")
    sent = bounded["json_schema"]["schema"]
    assert sent["properties"]["patch"]["properties"]["edits"]["maxItems"] == 3
    assert sent["properties"]["success_patterns"]["items"]["maxLength"] == 200


def test_the_embedded_preset_bounds_the_optimizer_only():
    from pathlib import Path

    import yaml

    preset = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf" / "llm" / "embedded.yaml").read_text())
    assert preset["optimizer"]["schema_max_items"] >= 1 and preset["optimizer"]["schema_max_chars"] >= 1
    assert "schema_max_items" not in preset["target"]
