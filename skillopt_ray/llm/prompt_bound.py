"""A prompt's worst-case token count, for budget admission (Ledger.hold): what a call may cost before the endpoint
says. Until a role's endpoint has answered, the bound is the prompt's UTF-8 bytes plus a few tokens a message (a
byte-level tokenizer never makes more tokens than bytes); after, the most tokens per character the endpoint has
counted (per endpoint: provider, address and model), plus a quarter, which is far tighter (about four characters a token for English) and is never
above the byte bound."""

from __future__ import annotations

import json
import math
from typing import Any

from skillopt_envs.chat import IMAGE_PART_CHARS, ChatRequest, content_text

PER_MESSAGE = 8  # a message's framing (role, separators) in tokens, at most
MARGIN = 1.25


def prompt_text(req: ChatRequest) -> str:
    """The request's text as the endpoint reads it: every message's content and any tool definitions."""
    parts = [content_text(m.get("content"), IMAGE_PART_CHARS * "x") for m in req.messages]
    for m in req.messages:
        calls = m.get("tool_calls")
        if calls:
            parts.append(json.dumps(calls))
    tools: Any = getattr(req, "tools", None)
    if tools:
        parts.append(json.dumps(tools))
    return "".join(parts)


class PromptBound:
    """Per endpoint, the highest tokens-per-character ratio it has reported (an in-memory calibration)."""

    def __init__(self) -> None:
        self.ratio: dict[str, float] = {}

    def worst(self, req: ChatRequest, endpoint: str) -> tuple[int, int]:
        """(worst-case prompt tokens, characters) of `req` sent to `endpoint`."""
        text = prompt_text(req)
        framing = PER_MESSAGE * (len(req.messages) + 1)
        by_bytes = len(text.encode("utf-8")) + framing
        r = self.ratio.get(endpoint)
        if r is None:
            return by_bytes, len(text)
        return min(by_bytes, math.ceil(len(text) * r * MARGIN) + framing), len(text)

    def observe(self, endpoint: str, chars: int, prompt_tokens: int) -> None:
        """An answered call: its prompt's characters and the tokens the endpoint counted for them."""
        if chars > 0 and prompt_tokens > 0:
            self.ratio[endpoint] = max(self.ratio.get(endpoint, 0.0), prompt_tokens / chars)
