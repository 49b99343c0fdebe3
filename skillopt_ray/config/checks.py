"""Checks against the chosen presets: the experiment against its benchmark, the benchmark's own options and whether it
runs an agent harness (the benchmark registry answers; no benchmark module is imported)."""

from __future__ import annotations

from skillopt_ray.config.schema import Config, ConfigError


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


def check_harness(cfg: Config) -> None:
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


def cross_field(cfg: Config) -> None:
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
