"""Which API a role speaks: the reference's rule for sending a model through OpenAI's Responses API.

Both the schema's validation (skillopt_ray/config/validation.py) and the LLM layer (skillopt_ray/llm/client.py,
skillopt_ray/llm/gateway.py) read this rule: it lives with the configuration, on the floor beneath the LLM layer, and
imports nothing.
"""

from __future__ import annotations

# the models the reference sends through the Responses API; a model matches one, ignoring case and surrounding
# spaces, when it is that name or that name followed by "-" and a suffix (a dated or sized variant)
RESPONSES_MODELS = ("gpt-5-codex", "gpt-5.1-codex", "gpt-5.2-codex", "gpt-5.3-codex", "codex-mini", "gpt-5.4-pro")

# the providers that speak the Responses API (the OpenAI API itself, compatible servers, Azure OpenAI)
RESPONSES_PROVIDERS = ("openai", "azure")


def listed_for_responses(model: str) -> bool:
    """Whether the reference's rule sends `model` through the Responses API."""
    name = (model or "").strip().lower()
    return any(name == m or name.startswith(m + "-") for m in RESPONSES_MODELS)


def resolved_api(provider: str, api: str, model: str) -> str:
    """`chat` or `responses`: what a role's `api` setting means for its provider and model."""
    if api != "auto":
        return api
    return "responses" if provider in RESPONSES_PROVIDERS and listed_for_responses(model) else "chat"
