"""The optimizer model for mining: the project's own config (Hydra-style overrides such as `llm=openai`), the real
gateway, its ledger enforcing the harvest's token and call caps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from skillopt_ray.cli.review_gate import Endpoint

if TYPE_CHECKING:
    from skillopt_ray.config.schema import Config


class MinerRefused(Exception):
    """A one-line refusal (exit 2)."""


def night_config(overrides: list[str]) -> Config:
    """The config the night runs with, as far as the harvest reads it: the sleep preset, then the command's overrides
    (its `llm` section for mining, its gate for the floor), composed once and typed, with the run's own defaults and
    checks. A bad override is a one-line refusal."""
    from skillopt_ray.cli.compose import compose
    from skillopt_ray.cli.errors import UsageError

    try:  # the task folder is not known yet: the harvest reads no env setting
        return compose(["+experiment=sleep", "env.data_dir=.", *overrides])
    except UsageError as e:
        raise MinerRefused(str(e)) from None


def optimizer_endpoint(llm_cfg: Any) -> Endpoint:
    o = llm_cfg.optimizer
    return Endpoint(str(o.provider), str(o.base_url or llm_cfg.base_url or ""))


def digest_host(llm_cfg: Any) -> str:
    """The optimizer's host as the consent to send digests is remembered ("" for a local one)."""
    ep = optimizer_endpoint(llm_cfg)
    return "" if ep.local else (urlparse(ep.base_url).hostname or ep.provider)


def gateway(llm_cfg: Any, max_tokens: int, max_calls: int, send_digests: bool) -> Any:
    """A gateway for the optimizer role with the caps set; refuses a non-local optimizer unless the user said the
    digests may be sent. None for the embedded model, which runs only inside a training run."""
    from skillopt_ray.llm.gateway import Gateway

    ep = optimizer_endpoint(llm_cfg)
    if ep.provider == "embedded":
        return None
    if not ep.local and not send_digests:
        raise MinerRefused(
            f"mining sends redacted session digests to the optimizer at {ep.base_url or ep.provider}, which is not "
            "on this machine; pass --send-digests once to allow it for this project, or --no-model to mine without a "
            "model"
        )
    llm_cfg.budget.max_tokens = max_tokens
    llm_cfg.budget.max_calls = max_calls
    return Gateway(llm_cfg, None, None)  # no response cache: nothing transcript-derived is kept on disk
