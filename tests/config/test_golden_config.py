"""The configuration's public behaviour, pinned byte for byte: every validation message, the key suggestions, the
price parser, the redaction and the run identity, on fixed inputs (tests/data/golden/config.txt, written by today's
code). A change that only moves code (issue 39: the schema, its validation and the presets' checks in modules of
their own) must leave the file as it is; a change that means to alter a message rewrites the file with
SKILLOPT_GOLDEN_WRITE=1 and shows the difference in review."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from skillopt_ray import cli
from skillopt_ray.config import (
    Config,
    ConfigError,
    from_container,
    parse_price,
    redact,
    run_identity,
    schema_paths,
    suggest_keys,
    to_container,
    validate,
)

GOLDEN = Path(__file__).parent.parent / "data" / "golden"

# (dotted key, value) changes to the default Config, each validated on its own: one per rule of the validation
CASES: list[list[tuple[str, Any]]] = [
    [],
    [("mode", "serve")],
    [("optimizer.epochs", 0)],
    [("optimizer.batch_size", -1)],
    [("optimizer.minibatch_size", 0)],
    [("optimizer.merge_batch_size", 1)],
    [("optimizer.learning_rate", 0)],
    [("optimizer.min_learning_rate", 0)],
    [("optimizer.min_learning_rate", 6)],
    [("optimizer.lr_schedule", "step")],
    [("optimizer.lr_control_mode", "auto")],
    [("optimizer.skill_aware_appendix_source", "all")],
    [("optimizer.skill_aware_consolidate_threshold", -1)],
    [("optimizer.update_mode", "merge")],
    [("optimizer.gate_metric", "median")],
    [("optimizer.mixed_weight", 1.5)],
    [("optimizer.rollouts_per_task", 0)],
    [("optimizer.gate_test", "t")],
    [("optimizer.gate_alpha", 0.5)],
    [("optimizer.slow_update_samples", 0)],
    [("optimizer.slow_update_pairs", "all")],
    [("optimizer.max_infra_failure_fraction", -0.1)],
    [("llm.target.provider", "bedrock")],
    [("llm.optimizer.structured_output", "xml")],
    [("llm.target.http_client", "curl")],
    [("llm.target.harness", "aider")],
    [("llm.optimizer.harness", "codex")],
    [("llm.target.agent.codex_sandbox", "none")],
    [("llm.target.agent.jail", "docker")],
    [("llm.target.agent.processes", 8)],
    [("llm.target.agent.disk_mb", 1)],
    [("llm.target.agent.tmp_mb", 1)],
    [("llm.target.schema_max_items", 0)],
    [("llm.target.max_tokens", 0)],
    [("llm.target.max_completion_tokens", 0)],
    [("llm.target.max_reply_tokens", 0)],
    [("llm.target.context_tokens", 100)],
    [("llm.target.context_tokens", 400)],
    [("llm.target.reasoning_effort", "max")],
    [("llm.target.provider", "anthropic"), ("llm.target.reasoning_effort", "huge")],
    [("llm.target.connect_timeout_s", 0)],
    [("llm.target.silence_probe_s", -1)],
    [("llm.target.max_concurrency", 0)],
    [("llm.target.timeout_s", 0)],
    [("llm.target.requests_per_minute", -1)],
    [("llm.target.tokens_per_minute", -1)],
    [("llm.target.silence_probe_s", 0.0), ("llm.target.timeout_s", 60.0)],
    [("llm.target.temperature", 3.0)],
    [("llm.target.api", "grpc")],
    [("llm.target.reasoning_summary", "long")],
    [("llm.target.thinking", "maybe")],
    [("llm.target.thinking_wire", "header")],
    [("llm.target.api", "responses")],
    [("llm.target.provider", "openai"), ("llm.target.reasoning_summary", "auto")],
    [("llm.target.thinking", "enabled")],
    [("llm.target.provider", "openai"), ("llm.target.api", "responses"), ("llm.target.thinking_wire", "minimax")],
    [
        ("llm.target.thinking_wire", "minimax"),
        ("llm.target.thinking", "disabled"),
        ("llm.target.model", "MiniMax-M2.1"),
    ],
    [
        ("llm.target.provider", "azure"),
        ("llm.target.api", "responses"),
        ("llm.target.azure_api_version", "2024-10-21"),
    ],
    [("llm.budget.max_cost_usd", -1.0)],
    [("llm.budget.max_calls", -1)],
    [("llm.base_url", "ftp://example.com")],
    [("llm.optimizer.base_url", "localhost:8000")],
    [("llm.target.azure_endpoint", "http://host:port/")],
    [("llm.embedded.server_url", "http://")],
    [("llm.cache_mode", "always")],
    [("llm.truncated_reply", "ignore")],
    [("llm.max_retries", -1)],
    [("env.max_turns", 0)],
    [("env.history_window", -1)],
    [("env.limit_test", -1)],
    [("ray.env_actors", 0)],
    [("ray.episodes_per_actor", 0)],
    [("ray.actor_num_cpus", -1.0)],
    [("ray.episode_retries", -1)],
    [("ray.episode_timeout_s", 0.5)],
    [("ray.gateway_shards", 0)],
    [("ray.env_resource_per_actor", 0.0)],
    [("ray.head", "thin")],
    [("ray.driver_node", "head")],
    [("eval.split", "dev")],
    [("debug.progress", "fancy")],
    [("mode", "eval")],
    [("experiment", "searchqa")],
    [("env.options", {"env_allow": "HOME"})],
    [("env.options", {"env_allow": ["LANG", "OPENAI_API_KEY", "HF_TOKEN"]})],
    [("env.name", "nope")],
    [("env.name", "custom")],
    [("env.name", "searchqa"), ("env.options", {"no_such_option": 1})],
    [("llm.target.harness", "codex")],
    [("env.name", "searchqa"), ("experiment", "searchqa"), ("llm.target.harness", "codex")],
]

# command lines of the run command refused before anything starts (stderr and exit code)
COMMANDS = [
    [],
    ["+experiment=nope"],
    ["+experiment=alfworld", "optimizer.bogus=1"],
    ["+experiment=alfworld", "optimizer.learnig_rate=3"],
    ["+experiment=alfworld", "optimizer.epochs=abc"],
    ["+experiment=alfworld", "optimizer.merge_batch_size=1"],
    ["+experiment=alfworld", "llm.prices.gpt-x.input_per_mtok=cheap"],
    ["+experiment=alfworld", "llm.prices.gpt-x.inptu_per_mtok=1"],
]


def _changed(changes: list[tuple[str, Any]]) -> Config:
    cfg = Config()
    for key, value in changes:
        *parents, leaf = key.split(".")
        node: Any = cfg
        for p in parents:
            node = getattr(node, p)
        setattr(node, leaf, value)
    return cfg


def _outcome(fn: Any, *args: Any) -> str:
    try:
        return f"ok {fn(*args)!r}"
    except ConfigError as e:
        return f"ConfigError: {e}"


def _validation() -> list[str]:
    out = []
    for changes in CASES:
        label = " ".join(f"{k}={v!r}" for k, v in changes) or "(defaults)"
        out.append(f"{label} -> {_outcome(lambda c: validate(c) and 'valid', _changed(changes))}")
    return out


def _keys_and_prices() -> list[str]:
    out = [f"schema_paths: {len(schema_paths()) > 150} {'llm.prices.<name>.input_per_mtok' in schema_paths()}"]
    for key in ("optimizer.learnig_rate", "learning_rate", "llm.target.modle", "ray.zzz", "nothing.like.it"):
        out.append(f"suggest_keys({key}) -> {suggest_keys(key)}")
    for model, field, raw in (
        ("gpt-x", "input_per_mtok", "0.15"),
        ("gpt-x", "input_per_mtok", "cheap"),
        ("gpt-x", "output_per_mtok", "-1"),
        ("gpt-x", "inptu_per_mtok", "1"),
        ("gpt-x", "zzz", "1"),
    ):
        out.append(f"parse_price({model}, {field}, {raw}) -> {_outcome(parse_price, model, field, raw)}")
    return out


def _data() -> list[str]:
    # fixed plain data, not the schema's defaults: a new config key elsewhere leaves these lines alone
    data = {
        "experiment": "alfworld",
        "seed": 7,
        "output_dir": "outputs",
        "ray": {"env_actors": 2},
        "llm": {
            "api_key": "sk-1",
            "budget": {"max_calls": 3},
            "target": {"provider": "embedded", "base_url": "http://127.0.0.1:5/v1", "timeout_s": 9, "model": "m"},
            "optimizer": {"provider": "openai", "base_url": "http://h/v1", "api_key_env": "K", "token": ""},
        },
        "tracking": {"tags": {"token": "t", "owner": "ana"}},
        "items": [{"password": "p"}, {"secret_key": None}],
    }
    cfg = Config(experiment="alfworld")
    plain = dataclasses.asdict(cfg)
    return [
        f"redact: {json.dumps(redact(data), sort_keys=True)}",
        f"run_identity: {run_identity(data)} {run_identity(data, {'skill': 'abc'})}",
        f"to_container(dict) is itself: {to_container(plain) is plain}",
        f"from_container round trip: {from_container(plain) == cfg}",
        f"from_container through OmegaConf: {from_container({**plain, 'seed': '7'}).seed!r}",
    ]


def _commands(capsys: Any) -> list[str]:
    out = []
    for args in COMMANDS:
        code = cli.main(list(args))
        err = capsys.readouterr().err
        out.append(f"{' '.join(args) or '(no arguments)'} -> exit {code}: {err!r}")
    return out


def _check(name: str, lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    path = GOLDEN / name
    if os.environ.get("SKILLOPT_GOLDEN_WRITE") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, f"{name} changed: diff it against a run of this test's code"


def test_validation_messages_are_unchanged():
    _check("config_validation.txt", _validation())


def test_keys_prices_and_plain_data_are_unchanged():
    _check("config_data.txt", _keys_and_prices() + _data())


def test_refused_command_lines_are_unchanged(capsys):
    _check("config_commands.txt", _commands(capsys))
