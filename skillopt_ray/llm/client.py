"""One role's endpoint: the official openai SDK over real HTTP, with our own retry policy.

The SDK's retries are disabled (max_retries=0) so retries never stack.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Optional

import openai

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.types import ChatRequest, LLMConfigError, LLMRequestRejected, LLMUnavailable


def describe(role_cfg: LLMRoleConfig) -> str:
    where = role_cfg.azure_endpoint if role_cfg.provider == "azure" else (role_cfg.base_url or "api.openai.com")
    return f"endpoint {where} model {role_cfg.model!r}"


def make_client(role_cfg: LLMRoleConfig) -> openai.AsyncOpenAI:
    """Build the SDK client; keys come from the env var the config names."""
    key = None
    if role_cfg.api_key_env:
        key = os.environ.get(role_cfg.api_key_env)
    common: dict[str, Any] = dict(max_retries=0, timeout=role_cfg.timeout_s)
    if role_cfg.provider == "azure":
        if not role_cfg.azure_endpoint:
            raise LLMConfigError("Azure backend needs an endpoint: set AZURE_OPENAI_ENDPOINT or llm.<role>.azure_endpoint")
        token = os.environ.get(role_cfg.azure_ad_token_env) if role_cfg.azure_ad_token_env else None
        if not key and not token:
            raise LLMConfigError(
                f"missing API key: set the environment variable {role_cfg.api_key_env or 'AZURE_OPENAI_API_KEY'}"
                " (or llm.<role>.azure_ad_token_env for Entra ID)"
            )
        return openai.AsyncAzureOpenAI(
            azure_endpoint=role_cfg.azure_endpoint,
            api_version=role_cfg.azure_api_version or "2024-10-21",
            api_key=key or None,
            azure_ad_token=token if not key else None,
            **common,
        )
    if role_cfg.api_key_env and not key and not role_cfg.base_url:
        raise LLMConfigError(f"missing API key: set the environment variable {role_cfg.api_key_env} for {describe(role_cfg)}")
    if not role_cfg.base_url and role_cfg.provider == "embedded":
        raise LLMConfigError("embedded backend has no base_url: it must be started by the CLI (python -m skillopt_ray)")
    return openai.AsyncOpenAI(base_url=role_cfg.base_url, api_key=key or "not-needed", **common)


def _retry_after(exc: Exception) -> Optional[float]:
    resp = getattr(exc, "response", None)
    if resp is None:
        return None
    val = resp.headers.get("retry-after") if hasattr(resp, "headers") else None
    if val is None:
        return None
    try:
        return max(0.0, float(val))
    except ValueError:
        return None


def _is_retryable(exc: Exception) -> bool:
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500 or exc.status_code == 408
    return False


_FIX = {
    400: "the request was rejected; check the model supports these parameters (structured_output, reasoning_effort)",
    401: "check the API key in the environment variable named by llm.<role>.api_key_env",
    403: "the key lacks access to this model or endpoint",
    404: "check the model (deployment) name and base_url",
}


@dataclass
class RetryPolicy:
    max_retries: int
    base_s: float
    max_s: float
    window_s: float

    @staticmethod
    def from_config(cfg: LLMConfig) -> "RetryPolicy":
        return RetryPolicy(cfg.max_retries, cfg.retry_base_s, cfg.retry_max_s, cfg.retry_window_s)


class RoleEndpoint:
    """Sends chat completions for one role."""

    def __init__(self, role: str, role_cfg: LLMRoleConfig, retry: RetryPolicy, rng_seed: int = 0):
        self.role = role
        self.cfg = role_cfg
        self.retry = retry
        self.client = make_client(role_cfg)
        self._rng = random.Random(rng_seed)
        self.retries_done = 0

    def request_kwargs(self, req: ChatRequest) -> dict[str, Any]:
        kw: dict[str, Any] = dict(
            model=self.cfg.model,
            messages=req.messages,
            temperature=self.cfg.temperature if req.temperature is None else req.temperature,
            max_tokens=req.max_tokens or self.cfg.max_tokens,
        )
        if self.cfg.reasoning_effort:
            kw["reasoning_effort"] = self.cfg.reasoning_effort
        if req.response_format is not None:
            kw["response_format"] = req.response_format
        return kw

    async def send(self, req: ChatRequest) -> Any:
        kw = self.request_kwargs(req)
        headers = {}
        if self.cfg.trace_headers:
            headers = {"X-SkillOpt-Role": req.role, "X-SkillOpt-Stage": req.stage, "X-SkillOpt-Key": req.key[:200]}
        start = time.monotonic()
        attempt = 0
        while True:
            try:
                return await self.client.chat.completions.create(**kw, extra_headers=headers or None)
            except Exception as exc:  # noqa: BLE001 - classified below
                if isinstance(exc, openai.APIStatusError) and not _is_retryable(exc):
                    code = exc.status_code
                    raise LLMRequestRejected(
                        f"{self.role} call rejected with HTTP {code} by {describe(self.cfg)}: "
                        f"{_FIX.get(code, 'see the provider documentation')}"
                    ) from None
                if not _is_retryable(exc):
                    raise
                delay = _retry_after(exc)
                if delay is None:
                    delay = min(self.retry.max_s, self.retry.base_s * (2**attempt))
                    delay *= 0.5 + self._rng.random()  # jitter
                elapsed = time.monotonic() - start
                if attempt >= self.retry.max_retries or elapsed + delay > self.retry.window_s:
                    kind = type(exc).__name__
                    raise LLMUnavailable(
                        f"{self.role} endpoint unavailable after {attempt + 1} attempts in {elapsed:.0f}s "
                        f"({kind}) at {describe(self.cfg)}: check the server is up and reachable, or raise llm.max_retries"
                    ) from None
                attempt += 1
                self.retries_done += 1
                await asyncio.sleep(delay)

    async def close(self) -> None:
        await self.client.close()
