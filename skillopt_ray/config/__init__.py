"""The run configuration: its typed schema (schema.py), the validation of ranges and enumerations (validation.py),
the checks against the chosen presets and benchmark (checks.py), the plain-data forms (plain.py), the run identity
(identity.py) and the key paths (keys.py). Everything is imported from here."""

from skillopt_ray.config.identity import run_identity
from skillopt_ray.config.keys import PRICE_FIELDS, parse_price, schema_paths, suggest_keys
from skillopt_ray.config.plain import PlainConfig, from_container, redact, to_container
from skillopt_ray.config.schema import (
    MISSING,
    AgentConfig,
    BudgetConfig,
    Config,
    ConfigError,
    DebugConfig,
    EmbeddedConfig,
    EnvConfig,
    EvalConfig,
    LLMConfig,
    LLMRoleConfig,
    OptimizerConfig,
    PriceConfig,
    RayConfig,
    TrackingConfig,
    judge_role,
    register_schema,
)
from skillopt_ray.config.validation import SPLITS, check_run_name, validate

__all__ = [
    "MISSING",
    "PRICE_FIELDS",
    "SPLITS",
    "AgentConfig",
    "BudgetConfig",
    "Config",
    "ConfigError",
    "DebugConfig",
    "EmbeddedConfig",
    "EnvConfig",
    "EvalConfig",
    "LLMConfig",
    "LLMRoleConfig",
    "judge_role",
    "OptimizerConfig",
    "PriceConfig",
    "RayConfig",
    "TrackingConfig",
    "check_run_name",
    "from_container",
    "PlainConfig",
    "parse_price",
    "redact",
    "register_schema",
    "run_identity",
    "schema_paths",
    "suggest_keys",
    "to_container",
    "validate",
]
