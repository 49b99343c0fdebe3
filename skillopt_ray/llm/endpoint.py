"""What the gateway needs of one role's endpoint, whichever API it speaks (Chat Completions, Responses, Messages)."""

from __future__ import annotations

from collections import Counter
from typing import Optional, Protocol

from skillopt_envs.chat import ChatRequest

from skillopt_ray.config import LLMRoleConfig
from skillopt_ray.llm.client import Completion
from skillopt_ray.llm.wire import ChatBody


class Endpoint(Protocol):
    """RoleEndpoint, ResponsesEndpoint and AnthropicEndpoint all have this shape."""

    role: str
    cfg: LLMRoleConfig
    retries_done: int
    faults: Counter  # fault kind -> attempts that hit it

    def prepare(self) -> None:
        """Build what a call needs (the SDK client), so that the first call only sends."""
        ...

    def completion_budget(self, req: ChatRequest) -> int: ...

    def request_kwargs(self, req: ChatRequest, budget: Optional[int] = None) -> ChatBody: ...

    async def send(self, req: ChatRequest, budget: Optional[int] = None) -> Completion: ...

    async def close(self) -> None: ...
