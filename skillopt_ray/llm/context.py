"""A prompt longer than the model's context: how endpoints say so, and what to change.

Servers word it differently (llama.cpp: "request (9756 tokens) exceeds the available context size";
OpenAI, Azure and vLLM: "maximum context length is N tokens", code context_length_exceeded; TGI: a 422
"inputs tokens + max_new_tokens must be <= N"). The client turns any of them into one line that names
the keys to change, instead of the generic advice for a rejected request.
"""

from __future__ import annotations

import re
from typing import Any

from skillopt_envs.jsontypes import JSONObject

_CODES = ("context_length_exceeded", "exceed_context_size", "string_above_max_length")
_WORDING = re.compile(
    r"context (length|size|window)|maximum model length|max_model_len|prompt is too long|input is too long"
    r"|too many (input )?tokens|tokens? \+ `?max_new_tokens`? must be <=",
    re.IGNORECASE,
)

EMBEDDED_SLOT = (
    "the embedded server gives each of its llm.embedded.parallel slots llm.embedded.ctx_size / parallel tokens, "
    "at most SmolLM2's 8192"
)


def context_overflow(status: int, err: JSONObject, message: str) -> bool:
    """Whether an HTTP error says the prompt (with its reply budget) does not fit the model's context."""
    if status not in (400, 413, 422):
        return False
    kind = f"{err.get('code') or ''} {err.get('type') or ''}".lower()
    return any(c in kind for c in _CODES) or bool(_WORDING.search(message))


def context_advice(role: str, cfg: Any) -> str:
    """What to change, for this role (`cfg`: its LLMRoleConfig)."""
    embedded = cfg.provider == "embedded"
    if role != "optimizer":
        fix = (
            "the target's conversation is longer than the model's context: fewer turns (env.max_turns), shorter "
            "feedback, or a model with a longer context"
        )
        return fix + (f" ({EMBEDDED_SLOT})" if embedded else "")
    if cfg.context_tokens is None:
        return (
            "the prompt is longer than the model's context: set llm.optimizer.context_tokens to the model's context "
            "window (the length guard then cuts trajectories, marked, until prompts fit), or use smaller minibatches "
            "(optimizer.minibatch_size) / fewer slow-update samples, or a model with a longer context"
        )
    fix = (
        f"the length guard estimated this prompt to fit llm.optimizer.context_tokens={cfg.context_tokens}, but the server "
        "counts more: lower llm.optimizer.context_tokens"
    )
    return fix + (f" ({EMBEDDED_SLOT})" if embedded else " to the model's real context window")
