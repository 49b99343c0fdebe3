"""Checks that need no cluster: they fail in milliseconds, before Ray or a model server starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.schema import ConfigError
from skillopt_ray.config.skill_files import SkillTexts, read_skill_file, skill_paths
from skillopt_ray.llm.wire import AgentOptions


def check_output_dir(path: Path, create: bool = True) -> None:
    """The output folder is writable: made and probed, or (create=False, a check that must leave no trace) its
    nearest existing folder lets us make it."""
    if not create:
        here = path
        while not os.path.lexists(here) and here != here.parent:
            here = here.parent
        if not here.is_dir() or not os.access(here, os.W_OK | os.X_OK):
            raise UsageError(f"output directory {path} is not writable (at {here}); set output_dir=<writable folder>")
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write_probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise UsageError(
            f"output directory {path} is not writable ({e.strerror}); set output_dir=<writable folder>"
        ) from None


def check_harness(data: PlainConfig) -> None:
    """A harness target (llm.target.harness=codex|claude_code) can start: its CLI is installed where the harness
    looks for it, bubblewrap is there for the jail, and Codex's own sandbox is not asked to run inside the jail.
    Otherwise every episode would fail after Ray had started."""
    target = data["llm"]["target"]
    harness = target.get("harness", "chat")
    if harness == "chat":
        return
    from skillopt_envs.sandbox import bwrap_path

    from skillopt_ray.harness.jail import default_prefix
    from skillopt_ray.harness.runner import BIN, AgentSettings, codex_sandbox_problem

    agent = cast(AgentOptions, dict(target.get("agent") or {}))
    exe = default_prefix(agent.get("prefix")) / "bin" / BIN[harness]
    if not exe.exists():
        raise UsageError(
            f"llm.target.harness={harness} needs the {BIN[harness]} CLI, not found at {exe}; run "
            "scripts/install_harnesses.sh (or set llm.target.agent.prefix=<the npm prefix that holds it>)"
        )
    if agent.get("jail", "bwrap") == "bwrap" and bwrap_path() is None:
        raise UsageError(
            f"llm.target.harness={harness} runs the agent in a bubblewrap jail, and bwrap is not installed; "
            "apt-get install bubblewrap (or llm.target.agent.jail=none, unsafe)"
        )
    problem = codex_sandbox_problem(AgentSettings.from_gateway({"harness": harness, "model": "", "agent": agent}, 0))
    if problem:
        raise UsageError(problem)


def needs_embedded_server(data: PlainConfig) -> bool:
    """A role runs on the embedded model and calls will reach it (replay mode answers from the cache)."""
    return (
        any(data["llm"][r]["provider"] == "embedded" for r in ("target", "optimizer"))
        and data["llm"]["cache_mode"] != "replay"
    )


def check_embedded_model(data: PlainConfig) -> None:
    """The model file the embedded server would serve exists (llm=local names an installed model)."""
    from skillopt_ray.llm.embedded import EmbeddedUnavailable, resolve_model_path

    e = data["llm"].get("embedded") or {}
    if e.get("server_url") or not needs_embedded_server(data):
        return
    try:
        resolve_model_path(e.get("model_path"))
    except EmbeddedUnavailable as err:
        raise UsageError(str(err)) from None


def check_reviewed_tasks(data: PlainConfig) -> None:
    """A harvested task folder (skillopt_ray.sleep) goes to a remote endpoint only once reviewed."""
    from skillopt_ray.cli.review_gate import ReviewRefused, check_run

    try:
        check_run(data)
    except ReviewRefused as e:
        raise UsageError(str(e)) from None


def check_keys(data: PlainConfig) -> None:
    """Every remote role has its endpoint and the environment variable holding its key, and a harness target its
    CLI (check_harness)."""
    check_harness(data)
    check_embedded_model(data)
    check_endpoints(data)


def check_endpoints(data: PlainConfig) -> None:
    """Every remote role has its endpoint and the environment variable holding its key."""
    for role in ("target", "optimizer", "judge"):
        r = data["llm"].get(role) or {}
        if not r.get("model") or r["provider"] == "embedded":  # an unset judge is the optimizer's endpoint
            continue
        if r["provider"] == "azure" and not r.get("azure_endpoint"):
            raise UsageError(f"Azure backend needs an endpoint: set AZURE_OPENAI_ENDPOINT or llm.{role}.azure_endpoint")
        has_url = r.get("base_url") or data["llm"].get("base_url")
        if data["llm"]["backend"] == "compatible" and not has_url:  # before the key: the URL is what is missing
            raise UsageError(
                "llm=compatible needs a server URL: add llm.base_url=http://host:port/v1 (or set COMPATIBLE_BASE_URL)"
            )
        env = r.get("api_key_env")
        token_env = r.get("azure_ad_token_env")
        if env and not os.environ.get(env) and not (token_env and os.environ.get(token_env)):
            if r["provider"] == "openai" and has_url and data["llm"]["backend"] == "compatible":
                continue  # local OpenAI-compatible servers often need no key
            raise UsageError(
                f"missing API key for llm.{role} ({data['llm']['backend']}): set the environment variable {env}"
            )


def skill_files(data: PlainConfig) -> list[tuple[str, str]]:
    """(key, path) of the skill documents this run reads."""
    return skill_paths(data.get("skill_init"), data["mode"], data["eval"].get("skill_path"))


def check_skill_files(data: PlainConfig) -> SkillTexts:
    """The skill documents the run will read, read once: present, regular, UTF-8 text (config.skill_files)."""
    texts: SkillTexts = {}
    for key, value in skill_files(data):
        try:
            texts[key] = read_skill_file(value, key)
        except ConfigError as e:
            raise UsageError(str(e)) from None
    return texts


def skill_warnings(data: PlainConfig, texts: SkillTexts) -> list[str]:
    """One line per skill file that is empty or blank (the run is allowed, but is rarely what was meant)."""
    out = []
    for key, value in skill_files(data):
        if key in texts and not texts[key].strip():
            fix = (
                "drop skill_init to start from the benchmark's seed skill"
                if key == "skill_init"
                else "give eval.skill_path a skill with rules"
            )
            out.append(f"warning: {key}={value!r} is empty: the run uses a skill with no rules ({fix})")
    return out


def run_splits(data: PlainConfig) -> list[str]:
    """The splits a run reads (the driver's: train, selection and test, or eval.split alone)."""
    env = data["env"]
    if data["mode"] == "eval":
        return [data["eval"]["split"]]
    return [env["train_split"], env["selection_split"], env["test_split"]]


def data_configured(data: PlainConfig) -> bool:
    """The config points at data or manifests (env.data_dir, env.manifest_dir). Built-in samples are not checked
    here, nor data named by an environment variable alone: importing the ALFWorld engine sets ALFWORLD_DATA in its
    process, so in a process that played a game the variable may not be the user's; the driver reads such data."""
    env = data["env"]
    return bool(env.get("data_dir") or env.get("manifest_dir"))


def check_benchmark_data(data: PlainConfig) -> None:
    """Read every split the run uses (manifests, item files, dataset.json) so that broken or repeated entries are
    one line naming the file before Ray starts; the driver reads them again, as they are then."""
    import skillopt_envs

    if not data_configured(data):
        return
    try:
        bench = skillopt_envs.make(data["env"]["name"], data["env"])
        try:
            bench.preflight(run_splits(data))
        finally:
            bench.close()
    except skillopt_envs.DataError as e:
        raise UsageError(str(e)) from None


def check_config_dir(folder: Path) -> None:
    """Every YAML file under a --config-dir is UTF-8 and parses: a bad one is named with its line, instead of
    Hydra's error about whatever config it was reading."""
    import yaml

    for path in sorted(Path(folder).rglob("*.yaml")) + sorted(Path(folder).rglob("*.yml")):
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise UsageError(f"--config-dir {folder}: {path} cannot be read ({e.strerror})") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw[: e.start].count(b"\n") + 1
            raise UsageError(
                f"{path}: line {line} is not UTF-8 text (byte {e.start}); save the file as UTF-8 or move it out of "
                f"--config-dir {folder}"
            ) from None
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            where = f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else "somewhere"
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise UsageError(
                f"{path}: {where} does not parse as YAML ({problem}); fix the file or move it out of --config-dir {folder}"
            ) from None
