"""Which key a launch sends to which host, and the rule that a URL typed in the form gets no key meant elsewhere.

A run sends each role's key (its `api_key_env`) to that role's endpoint, the MLflow token to the tracking server
and OfficeQA's search key to its search proxy. A form that changes one of those URLs would otherwise hand the key
to whatever address it names. From the page, a key goes only to the endpoint its preset sends it to (scheme, host
and port: another port of the same host may be another user's listener), or to an endpoint the user allowed when
starting the dashboard (`--allow-endpoint HOST:PORT`). The MLflow token goes only to the tracking server the user's
environment names (MLFLOW_TRACKING_URI), never to one typed in the page. The command line is not limited.
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

    @property
    def endpoint(self) -> str:
        return endpoint_of(self.url)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "host": self.host, "endpoint": self.endpoint, "set": bool(os.environ.get(self.key_env))}


DEFAULT_PORTS = {"http": 80, "https": 443}


def url_host(url: str) -> str:
    """The host a URL reaches (lower case, no port); "" for none or a local file."""
    try:
        return (urlsplit(url if "://" in url else f"//{url}").hostname or "").lower()
    except ValueError:
        return url.lower()


def endpoint_of(url: str) -> str:
    """Where a URL sends its requests, as `scheme://host:port` (scheme and host lower case, the scheme's default
    port written out); "" for none. A URL whose port does not parse is its own text, matching nothing else."""
    if not url.strip():
        return ""
    try:
        parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
        scheme = parts.scheme.lower()
        port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    except ValueError:
        return url.strip().lower()
    host = (parts.hostname or "").lower()
    return f"{scheme}://{host}:{port}" if host else ""


def allowed_endpoint(value: str) -> str:
    """An `--allow-endpoint` value as the `host:port` it allows (any scheme); ValueError (one line) for a bare host,
    which would open every port of it."""
    text = value.strip()
    try:
        parts = urlsplit(text if "://" in text else f"//{text}")
        port = parts.port
    except ValueError:
        raise ValueError(f"--allow-endpoint {value}: not HOST:PORT") from None
    if not parts.hostname or port is None:
        raise ValueError(f"--allow-endpoint {value}: give the port too (HOST:PORT, e.g. 127.0.0.1:8000)")
    return f"{parts.hostname.lower()}:{port}"


def _host_port(endpoint: str) -> str:
    return endpoint.split("://", 1)[-1]


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
    if tracking.get("mlflow", True) and is_http(uri):
        out += [KeyRoute("tracking.tracking_uri", uri, name) for name in MLFLOW_SECRETS]
    options = _get(data, "env.options") or {}
    if options.get("search_api_url") and options.get("search_auth_env"):
        out.append(KeyRoute("env.options.search_api_url", str(options["search_api_url"]), options["search_auth_env"]))
    return out


def is_http(uri: str) -> bool:
    """A URL MLflow's client sends credentials to (any letter case: `HTTP://` is http too)."""
    return uri.strip().lower().startswith(("http://", "https://"))


def tracking_home() -> str:
    """The tracking server the user's environment names (where the MLflow token is meant to go), as an endpoint."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or ""
    return endpoint_of(uri) if is_http(uri) else ""


def tracking_is_home(data: PlainConfig) -> bool:
    """Whether a run of this config sends MLflow requests only to the server the environment names (or to none)."""
    tracking = data.get("tracking") or {}
    uri = str(tracking.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or "")
    return not tracking.get("mlflow", True) or not is_http(uri) or endpoint_of(uri) == tracking_home()


def refuse_key_redirects(data: PlainConfig, preset: PlainConfig, allowed: frozenset[str]) -> None:
    """UsageError if a key set in the environment would go to an endpoint (scheme, host, port) its preset does not
    send it to and the user did not allow (`preset`: the same config composed from the form's preset choices only);
    the MLflow token only ever to the environment's tracking server."""
    meant: dict[tuple[str, str], str] = {(r.setting, r.key_env): r.endpoint for r in key_routes(preset)}
    for route in key_routes(data):
        if not os.environ.get(route.key_env) or not route.endpoint:
            continue  # a key that is not set is sent nowhere
        tracking = route.key_env in MLFLOW_SECRETS
        home: Optional[str] = tracking_home() if tracking else meant.get((route.setting, route.key_env))
        if route.endpoint == home or not tracking and _host_port(route.endpoint) in allowed:
            continue
        where = f"meant for {home}" if home else "meant for no address the page may set"
        fix = (
            "set MLFLOW_TRACKING_URI in the dashboard's environment, or use the command line"
            if tracking
            else f"start the dashboard with --allow-endpoint {_host_port(route.endpoint)} to allow it, or use the "
            "preset's endpoint"
        )
        raise UsageError(f"{route.setting}: the page would send {route.key_env} ({where}) to {route.endpoint}; {fix}")
