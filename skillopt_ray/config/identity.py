"""The run identity: a stable hash of the keys that decide a run's results (transport, limits and places left out)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Optional

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


# optimizer keys that decide whether a run stops and what it reports, not what it computes: raising one, as the
# refusal advises, resumes the same run rather than paying for its calls again
_OPTIMIZER_NOT_IDENTITY = ("max_data_error_fraction", "max_infra_failure_fraction")


def run_identity(cfg_dict: Mapping[str, Any], inputs: Optional[Mapping[str, object]] = None) -> str:
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
    if isinstance(ident.get("optimizer"), Mapping):
        ident["optimizer"] = {k: v for k, v in ident["optimizer"].items() if k not in _OPTIMIZER_NOT_IDENTITY}
    if inputs:
        ident["_inputs"] = inputs
    blob = json.dumps(ident, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]
