"""Checks that need no cluster: they fail in milliseconds, before Ray or a model server starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skillopt_ray.cli.errors import UsageError


def check_output_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write_probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise UsageError(
            f"output directory {path} is not writable ({e.strerror}); set output_dir=<writable folder>"
        ) from None


def check_keys(data: dict[str, Any]) -> None:
    """Every remote role has its endpoint and the environment variable holding its key."""
    for role in ("target", "optimizer"):
        r = data["llm"][role]
        if r["provider"] == "embedded":
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


def skill_files(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, path) of the skill documents this run reads."""
    keys = [("skill_init", data.get("skill_init"))]
    if data["mode"] == "eval":
        keys.append(("eval.skill_path", data["eval"].get("skill_path")))
    return [(k, v) for k, v in keys if v]


def check_skill_files(data: dict[str, Any]) -> None:
    """Skill documents the run will read: present, regular, UTF-8 text."""
    for key, value in skill_files(data):
        path = Path(value)
        if not path.is_file():
            raise UsageError(f"{key}={value!r} is not a file; give the path to a skill .md file")
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise UsageError(
                f"{key}={value!r} cannot be read ({e.strerror}); give the path to a skill .md file"
            ) from None
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(
                f"{key}={value!r} is not UTF-8 text (byte {e.start} cannot be decoded: a binary file?); "
                "give the path to a skill .md file"
            ) from None
        if b"\x00" in raw:
            raise UsageError(f"{key}={value!r} contains NUL bytes (a binary file?); give the path to a skill .md file")
