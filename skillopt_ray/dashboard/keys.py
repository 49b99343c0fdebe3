"""Which key a launch sends to which host, and the rule that a URL typed in the form gets no key meant elsewhere.

A run sends each role's key (its `api_key_env`) to that role's endpoint, the MLflow token to the tracking server
and OfficeQA's search key to its search proxy. A form that changes one of those URLs would otherwise hand the key
to whatever host it names. From the page, a key goes only to the host its preset sends it to, or to a host the
user allowed when starting the dashboard (`--allow-endpoint HOST`); the command line is not limited.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Optional
from urllib.parse import urlsplit

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.config.plain import PlainConfig

# Where a provider's SDK sends its requests when no URL is configured.
DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
# The environment variables MLflow's client sends to an http(s) tracking server.
MLFLOW_SECRETS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD")


@dataclass(frozen=True)
class KeyRoute:
    """One setting's URL and the environment variable whose value is sent there."""

    setting: str
    url: str
    key_env: str

    @property
    def host(self) -> str:
        return url_host(self.url)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "host": self.host, "set": bool(os.environ.get(self.key_env))}


def url_host(url: str) -> str:
    """The host a URL reaches (lower case, no port); "" for none or a local file."""
    try:
        return (urlsplit(url if "://" in url else f"//{url}").hostname or "").lower()
    except ValueError:
        return url.lower()


def _get(data: PlainConfig, dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _role_routes(data: PlainConfig) -> list[KeyRoute]:
    llm = data.get("llm") or {}
    out = []
    for role in ("target", "optimizer"):
        r = llm.get(role) or {}
        provider = r.get("provider")
        if provider == "embedded":
            continue
        if provider == "azure":
            url = r.get("azure_endpoint") or ""
        else:
            url = r.get("base_url") or llm.get("base_url") or DEFAULT_URLS.get(str(provider), "")
        for name in ("api_key_env", "azure_ad_token_env"):
            if r.get(name):
                out.append(KeyRoute(f"llm.{role}", str(url), str(r[name])))
    return out


def key_routes(data: PlainConfig) -> list[KeyRoute]:
    """Every (setting, URL, key variable) a run of this resolved config sends a key along."""
    out = _role_routes(data)
    tracking = data.get("tracking") or {}
    uri = str(tracking.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or "")
    if tracking.get("mlflow", True) and uri.startswith(("http://", "https://")):
        out += [KeyRoute("tracking.tracking_uri", uri, name) for name in MLFLOW_SECRETS]
    options = _get(data, "env.options") or {}
    if options.get("search_api_url") and options.get("search_auth_env"):
        out.append(KeyRoute("env.options.search_api_url", str(options["search_api_url"]), options["search_auth_env"]))
    return out


def refuse_key_redirects(data: PlainConfig, preset: PlainConfig, allowed: frozenset[str]) -> None:
    """UsageError if a key set in the environment would go to a host its preset does not send it to and the user
    did not allow (`preset`: the same config composed from the form's preset choices only)."""
    meant: dict[tuple[str, str], str] = {(r.setting, r.key_env): r.host for r in key_routes(preset)}
    for route in key_routes(data):
        if not os.environ.get(route.key_env) or not route.host:
            continue  # a key that is not set is sent nowhere
        home: Optional[str] = meant.get((route.setting, route.key_env))
        if route.host == home or route.host in allowed:
            continue
        where = f"meant for {home}" if home else "meant for no host the page may set"
        raise UsageError(
            f"{route.setting}: the page would send {route.key_env} ({where}) to {route.host}; start the dashboard "
            f"with --allow-endpoint {route.host} to allow that host, or use the preset's endpoint"
        )
