"""Range and enumeration checks the schema's types cannot express, each raising ConfigError with one line naming the
key and what is allowed."""

from __future__ import annotations

import re
from typing import Any, Optional

from skillopt_ray.config.checks import check_harness, cross_field
from skillopt_ray.config.schema import Config, ConfigError, LLMRoleConfig, OptimizerConfig


def _choice(key: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is invalid; allowed: {', '.join(map(str, allowed))}")


def _check_sequential(o: Any) -> None:
    """The sequential gate's boundaries: positive margins, the final one not above the accept one."""
    for name in ("gate_seq_accept_at", "gate_seq_reject_at", "gate_seq_final_at"):
        if not getattr(o, name) > 0:
            raise ConfigError(
                f"optimizer.{name}={getattr(o, name)!r} is invalid; use a positive number of net paired wins"
            )
    if o.gate_seq_final_at > o.gate_seq_accept_at:
        raise ConfigError(
            f"optimizer.gate_seq_final_at={o.gate_seq_final_at!r} is above gate_seq_accept_at={o.gate_seq_accept_at!r}; "
            "use a final margin at most the accept margin"
        )
    if str(o.gate_seq_deterministic).lower() not in ("auto", "true", "false"):  # Hydra reads true/false as booleans
        raise ConfigError(
            f"optimizer.gate_seq_deterministic={o.gate_seq_deterministic!r} is invalid; use auto, true or false"
        )
    if not 0 < o.gate_seq_task_p < 1:
        raise ConfigError(
            f"optimizer.gate_seq_task_p={o.gate_seq_task_p!r} is invalid; use a p-value in (0, 1), e.g. 0.05"
        )
    if not 0 < o.gate_seq_look_share <= 1:
        raise ConfigError(f"optimizer.gate_seq_look_share={o.gate_seq_look_share!r} is invalid; use a share in (0, 1]")
    if o.gate_seq_budget < 0:
        raise ConfigError(f"optimizer.gate_seq_budget={o.gate_seq_budget!r} is invalid; use 0 or more (e.g. 2.0)")
    if o.gate_judge_reask < 0:
        raise ConfigError(f"optimizer.gate_judge_reask={o.gate_judge_reask!r} is invalid; use 0 or more (e.g. 1)")
    if o.gate_seq_min_extra < 0:
        raise ConfigError(f"optimizer.gate_seq_min_extra={o.gate_seq_min_extra!r} is invalid; use 0 or more (e.g. 24)")


def _at_least(key: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise ConfigError(f"{key}={value!r} is invalid; it must be >= {minimum}")


def _fraction(key: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}={value!r} is invalid; it must be between 0 and 1")


SPLITS = ("train", "val", "valid_seen", "test", "valid_unseen", "all")


def validate(cfg: Config) -> Config:
    """Range and enumeration checks that the type system cannot express."""
    _choice("mode", cfg.mode, ("train", "eval"))
    check_run_name(cfg.run_name)
    _validate_optimizer(cfg.optimizer)
    for role in ("target", "optimizer", "judge"):
        if role != "judge" or cfg.llm.judge.model:  # an unset judge is the optimizer's endpoint, checked as such
            _validate_role(cfg, role, getattr(cfg.llm, role))
    for key in (
        "max_cost_usd",
        "max_tokens",
        "max_calls",
        "max_minutes",
    ):  # a negative cap would stop the run at its first call
        value = getattr(cfg.llm.budget, key)
        if value < 0:
            raise ConfigError(f"llm.budget.{key}={value!r} is invalid; give a cap >= 0 (0 = no cap)")
    _check_urls(cfg)
    check_harness(cfg)
    _validate_runtime(cfg)
    cross_field(cfg)
    return cfg


def check_run_name(name: Optional[str]) -> None:
    """A run name names a folder under <output_dir>/runs: a name, never a path (`../../mydata` wrote a run's files
    into a user's folder and replaced its config.yaml)."""
    if not name:  # unset or empty: the name is derived from the config
        return
    bad = (
        name in (".", "..")
        or "/" in name
        or "\\" in name
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
        or len(name.encode()) > 200
    )
    if bad:
        raise ConfigError(
            f"run_name={name!r} is not a plain name: give a folder name without '/', '\\' or control characters, "
            "not '.' or '..', at most 200 bytes (the run lives in <output_dir>/runs/<run_name>; move it elsewhere "
            "with output_dir)"
        )


def _validate_optimizer(o: OptimizerConfig) -> None:
    """The optimizer's enumerations, counts and rates."""
    _at_least("optimizer.epochs", o.epochs, 1)
    _at_least("optimizer.batch_size", o.batch_size, 1)
    _at_least("optimizer.minibatch_size", o.minibatch_size, 1)
    _at_least("optimizer.merge_batch_size", o.merge_batch_size, 2)
    _at_least("optimizer.learning_rate", o.learning_rate, 1)
    _at_least("optimizer.min_learning_rate", o.min_learning_rate, 1)
    if o.min_learning_rate > o.learning_rate:  # the reference would clamp every budget up to the minimum
        raise ConfigError(
            f"optimizer.min_learning_rate={o.min_learning_rate} is larger than optimizer.learning_rate={o.learning_rate}; "
            "the schedule decays from learning_rate down to min_learning_rate"
        )
    _choice("optimizer.lr_schedule", o.lr_schedule, ("constant", "linear", "cosine", "autonomous"))
    _choice("optimizer.lr_control_mode", o.lr_control_mode, ("fixed", "none", "autonomous"))
    _choice("optimizer.skill_aware_appendix_source", o.skill_aware_appendix_source, ("both", "failure_only"))
    _at_least("optimizer.skill_aware_consolidate_threshold", o.skill_aware_consolidate_threshold, 0)
    _choice("optimizer.update_mode", o.update_mode, ("patch", "rewrite_from_suggestions", "full_rewrite_minibatch"))
    _choice("optimizer.gate_metric", o.gate_metric, ("hard", "soft", "mixed"))
    _fraction("optimizer.mixed_weight", o.mixed_weight)
    _at_least("optimizer.rollouts_per_task", o.rollouts_per_task, 1)
    _choice("optimizer.gate_test", o.gate_test, ("none", "paired_bootstrap", "sign", "sequential", "auto"))
    _check_sequential(o)
    if not 0.0 < o.gate_alpha < 0.5:
        raise ConfigError(f"optimizer.gate_alpha={o.gate_alpha!r} is invalid; use a level between 0 and 0.5, e.g. 0.05")
    _at_least("optimizer.slow_update_samples", o.slow_update_samples, 1)
    _choice("optimizer.slow_update_pairs", o.slow_update_pairs, ("mixed", "changed", "unchanged"))
    _fraction("optimizer.max_infra_failure_fraction", o.max_infra_failure_fraction)
    _fraction("optimizer.max_data_error_fraction", o.max_data_error_fraction)


def _validate_role(cfg: Config, role: str, r: LLMRoleConfig) -> None:
    """One model role's provider, token budgets, timeouts and rate limits."""
    _choice(f"llm.{role}.provider", r.provider, ("openai", "azure", "embedded", "anthropic"))
    _choice(f"llm.{role}.structured_output", r.structured_output, ("json_schema", "json_object", "none"))
    _choice(f"llm.{role}.http_client", r.http_client, ("httpx", "aiohttp"))
    _choice(f"llm.{role}.harness", r.harness, ("chat", "codex", "claude_code") if role == "target" else ("chat",))
    _choice(
        f"llm.{role}.agent.codex_sandbox",
        r.agent.codex_sandbox,
        ("read-only", "workspace-write", "danger-full-access"),
    )
    _choice(f"llm.{role}.agent.jail", r.agent.jail, ("bwrap", "none"))
    for key, least in (("processes", 64), ("disk_mb", 16), ("disk_files", 256), ("file_mb", 1), ("tmp_mb", 16)):
        _at_least(f"llm.{role}.agent.{key}", getattr(r.agent, key), least)
    for key in ("schema_max_items", "schema_max_chars"):
        if getattr(r, key) is not None:
            _at_least(f"llm.{role}.{key}", getattr(r, key), 1)
    _at_least(f"llm.{role}.max_tokens", r.max_tokens, 1)
    if r.max_completion_tokens is not None:
        _at_least(f"llm.{role}.max_completion_tokens", r.max_completion_tokens, 1)
    if r.max_reply_tokens is not None:
        _at_least(f"llm.{role}.max_reply_tokens", r.max_reply_tokens, 1)
    if r.context_tokens is not None:
        _at_least(f"llm.{role}.context_tokens", r.context_tokens, 256)
        reply = r.reply_budget()
        if r.context_tokens <= reply:
            raise ConfigError(
                f"llm.{role}.context_tokens={r.context_tokens} leaves no room for a prompt beside the reply "
                f"budget ({reply} tokens): give the model's real context window, or lower llm.{role}.max_reply_tokens"
            )
    if r.reasoning_effort is not None:  # Claude also takes max (llm/anthropic_backend.py)
        _choice(
            f"llm.{role}.reasoning_effort",
            r.reasoning_effort,
            ("none", "minimal", "low", "medium", "high", "xhigh", *(("max",) if r.provider == "anthropic" else ())),
        )
    _at_least(f"llm.{role}.connect_timeout_s", r.connect_timeout_s, 0.1)
    _at_least(f"llm.{role}.silence_probe_s", r.silence_probe_s, 0)
    _at_least(f"llm.{role}.max_concurrency", r.max_concurrency, 1)
    _at_least(f"llm.{role}.timeout_s", r.timeout_s, 0.1)
    _at_least(f"llm.{role}.requests_per_minute", r.requests_per_minute, 0)
    _at_least(f"llm.{role}.tokens_per_minute", r.tokens_per_minute, 0)
    if r.silence_probe_s == 0 and cfg.llm.max_retries > 0 and r.timeout_s >= cfg.llm.retry_window_s:
        raise ConfigError(
            f"llm.{role}.timeout_s={r.timeout_s:g} is not below llm.retry_window_s={cfg.llm.retry_window_s:g}: "
            f"with llm.{role}.silence_probe_s=0 a timed-out call would never be retried; raise llm.retry_window_s "
            f"above {2 * r.timeout_s:g} (two attempts) or lower the timeout"
        )
    if r.temperature is not None and not 0.0 <= r.temperature <= 2.0:
        raise ConfigError(f"llm.{role}.temperature={r.temperature!r} is invalid; it must be between 0 and 2")
    _validate_api(role, r)


def _validate_api(role: str, r: LLMRoleConfig) -> None:
    """Which API the role speaks, and the settings only one API (or one server) takes."""
    from skillopt_ray.config.routing import RESPONSES_PROVIDERS, resolved_api

    _choice(f"llm.{role}.api", r.api, ("auto", "chat", "responses"))
    if r.reasoning_summary is not None:
        _choice(f"llm.{role}.reasoning_summary", r.reasoning_summary, ("auto", "concise", "detailed"))
    _choice(f"llm.{role}.thinking", r.thinking, ("server_default", "enabled", "disabled"))
    _choice(f"llm.{role}.thinking_wire", r.thinking_wire, ("none", "chat_template_kwargs", "minimax"))
    api = resolved_api(r.provider, r.api, r.model)
    if api == "responses" and r.provider not in RESPONSES_PROVIDERS:
        raise ConfigError(
            f"llm.{role}.api=responses needs provider openai or azure (llm.{role}.provider={r.provider}); use api=chat"
        )
    if r.reasoning_summary is not None and api != "responses":
        raise ConfigError(
            f"llm.{role}.reasoning_summary is sent by the Responses API only, and model {r.model!r} goes through Chat "
            f"Completions; set llm.{role}.api=responses or drop reasoning_summary"
        )
    if r.thinking != "server_default" and r.thinking_wire == "none":
        raise ConfigError(
            f"llm.{role}.thinking={r.thinking} needs llm.{role}.thinking_wire (how the server takes it): use llm=qwen "
            "or llm=minimax, or set thinking_wire=chat_template_kwargs|minimax"
        )
    if r.thinking_wire != "none" and api == "responses":
        raise ConfigError(
            f"llm.{role}.thinking_wire={r.thinking_wire} is a Chat Completions field; set llm.{role}.api=chat"
        )
    if r.thinking_wire == "minimax" and r.thinking == "disabled" and r.model.startswith("MiniMax-M2"):
        raise ConfigError(
            f"llm.{role}.thinking=disabled: MiniMax-M2 models always think; use thinking=server_default or another model"
        )
    version = r.azure_api_version or ""
    if (
        api == "responses"
        and r.provider == "azure"
        and re.match(r"\d{4}-\d{2}-\d{2}", version)
        and version < "2025-03-01"
    ):
        raise ConfigError(
            f"llm.{role}.azure_api_version={version} predates Azure's Responses API (model {r.model!r} goes through "
            f"it); set llm.{role}.azure_api_version=2025-04-01-preview or later"
        )


def _validate_runtime(cfg: Config) -> None:
    """The model client's modes, the environment's limits, Ray's resources, evaluation and progress display."""
    _choice("llm.cache_mode", cfg.llm.cache_mode, ("record", "replay", "off"))
    _choice("llm.truncated_reply", cfg.llm.truncated_reply, ("retry", "error", "keep"))
    _at_least("llm.max_retries", cfg.llm.max_retries, 0)
    _at_least("env.max_turns", cfg.env.max_turns, 1)
    _at_least("env.history_window", cfg.env.history_window, 0)
    for k in ("limit_train", "limit_selection", "limit_test"):
        _at_least(f"env.{k}", getattr(cfg.env, k), 0)
    _at_least("ray.env_actors", cfg.ray.env_actors, 1)
    _at_least("ray.episodes_per_actor", cfg.ray.episodes_per_actor, 1)
    _at_least("ray.actor_num_cpus", cfg.ray.actor_num_cpus, 0)
    _at_least("ray.episode_retries", cfg.ray.episode_retries, 0)
    _at_least("ray.episode_timeout_s", cfg.ray.episode_timeout_s, 1)
    _at_least("ray.gateway_shards", cfg.ray.gateway_shards, 1)
    if cfg.ray.env_resource_per_actor <= 0:
        raise ConfigError(f"ray.env_resource_per_actor={cfg.ray.env_resource_per_actor!r}: it must be > 0")
    if cfg.ray.mode not in ("auto", "local", "cluster"):
        raise ConfigError(
            f"ray.mode={cfg.ray.mode!r}: use auto (one process for a small job, Ray otherwise), local or cluster"
        )
    if cfg.ray.head not in ("lean", "full"):
        raise ConfigError(f"ray.head={cfg.ray.head!r}: use lean (a private cluster without Ray's monitors) or full")
    if cfg.ray.driver_node not in ("local", "any"):
        raise ConfigError(f"ray.driver_node={cfg.ray.driver_node!r}: use local (the CLI's node) or any")
    _choice("eval.split", cfg.eval.split, SPLITS)
    _choice("debug.progress", cfg.debug.progress, ("auto", "rich", "plain", "off"))
    if cfg.mode == "eval" and not cfg.eval.skill_path:
        raise ConfigError("mode=eval needs eval.skill_path=<path to a skill .md file>")


def _check_url(key: str, url: Optional[str]) -> None:
    from urllib.parse import urlsplit

    if url is None or url == "":
        return
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{key}={url!r} is not an http(s) URL; give the server's address, e.g. {key}=http://127.0.0.1:8000/v1"
        )


def _check_urls(cfg: Config) -> None:
    """Endpoint URLs are http(s) with a host: anything else would be retried as a dropped connection."""
    _check_url("llm.base_url", cfg.llm.base_url)
    for role in ("target", "optimizer", "judge"):
        r: LLMRoleConfig = getattr(cfg.llm, role)
        _check_url(f"llm.{role}.base_url", r.base_url)
        _check_url(f"llm.{role}.azure_endpoint", r.azure_endpoint)
    _check_url("llm.embedded.server_url", cfg.llm.embedded.server_url)
