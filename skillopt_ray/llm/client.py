"""One role's endpoint: the official openai SDK over real HTTP, with our own retry policy.

The SDK's retries are disabled (max_retries=0) so retries never stack. The SDK's response
parsing is bypassed (`with_raw_response`): the body is read and checked here, so every transport
fault -- a cut-off JSON body, an HTML page, a body that is not JSON, a reset connection, an
endpoint that accepts TCP and never answers -- is either retried within the retry window or ends
as one `LLMUnavailable` line naming the endpoint and the fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional, TypedDict

from skillopt_envs.chat import ChatMessage, ChatRequest, ContentPart, ToolCall
from skillopt_envs.jsontypes import JSONObject, as_int, as_object

from skillopt_ray.base.collector import imports_without_collector
from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.context import context_advice, context_overflow
from skillopt_ray.llm.types import LLMConfigError, LLMRequestRejected, LLMUnavailable, ReplyFiltered
from skillopt_ray.llm.wire import ChatBody


class _OpenAIOnFirstUse:
    """`import openai` costs about 0.7 s of CPU. Processes that import this module only to pass LLM handles
    around (the driver, env actors, the CLI) never use it; the gateway imports it at its first client."""

    def __getattr__(self, name: str) -> Any:
        with imports_without_collector():
            import openai as module

        globals()["openai"] = module
        return getattr(module, name)


openai: Any = _OpenAIOnFirstUse()

PROBE_TIMEOUT_S = 10.0  # the liveness probe's own timeout (shorter when silence_probe_s is shorter)


def probe_timeout(role_cfg: LLMRoleConfig) -> float:
    return min(PROBE_TIMEOUT_S, max(0.5, role_cfg.silence_probe_s))


def silent_endpoint_named_after(role_cfg: LLMRoleConfig) -> float:
    """At most how long an endpoint that accepts TCP and never answers takes to be named (seconds)."""
    if role_cfg.silence_probe_s and role_cfg.silence_probe_s < role_cfg.timeout_s:
        return role_cfg.silence_probe_s + probe_timeout(role_cfg)
    return role_cfg.timeout_s


def describe(role_cfg: LLMRoleConfig) -> str:
    where = role_cfg.azure_endpoint if role_cfg.provider == "azure" else (role_cfg.base_url or "api.openai.com")
    return f"endpoint {where} model {role_cfg.model!r}"


def _http_client(role_cfg: LLMRoleConfig, timeout: Any) -> Any:
    """The SDK's own HTTP client. httpx keeps the SDK's connection limits: its pool scans its connections on every
    request, so keeping more alive made 1,000 concurrent calls slower, not faster. aiohttp may open as many
    connections as calls may be in flight (scripts/bench_scale.py measures both)."""
    if role_cfg.http_client != "aiohttp":
        return openai.DefaultAsyncHttpxClient(timeout=timeout)
    from openai._constants import (
        DEFAULT_CONNECTION_LIMITS,  # an instance of the Limits class of the SDK's own httpx copy
    )

    n = max(1, role_cfg.max_concurrency)
    limits = type(DEFAULT_CONNECTION_LIMITS)(
        max_connections=max(n, DEFAULT_CONNECTION_LIMITS.max_connections or n),
        max_keepalive_connections=n,
        keepalive_expiry=30.0,
    )
    return openai.DefaultAioHttpClient(timeout=timeout, limits=limits)


class _ClientOptions(TypedDict):
    """The SDK client's options every provider gets."""

    max_retries: int
    timeout: Any  # the SDK's own Timeout
    http_client: Any  # the SDK's own HTTP client


def check_client_config(role_cfg: LLMRoleConfig) -> None:
    """Raise LLMConfigError for what would stop `make_client` (a missing key or endpoint), without building it."""
    key = os.environ.get(role_cfg.api_key_env) if role_cfg.api_key_env else None
    if role_cfg.provider == "azure":
        if not role_cfg.azure_endpoint:
            raise LLMConfigError(
                "Azure backend needs an endpoint: set AZURE_OPENAI_ENDPOINT or llm.<role>.azure_endpoint"
            )
        token = os.environ.get(role_cfg.azure_ad_token_env) if role_cfg.azure_ad_token_env else None
        if not key and not token:
            raise LLMConfigError(
                f"missing API key: set the environment variable {role_cfg.api_key_env or 'AZURE_OPENAI_API_KEY'}"
                " (or llm.<role>.azure_ad_token_env for Entra ID)"
            )
        return
    if role_cfg.api_key_env and not key and not role_cfg.base_url:
        raise LLMConfigError(
            f"missing API key: set the environment variable {role_cfg.api_key_env} for {describe(role_cfg)}"
        )
    if not role_cfg.base_url and role_cfg.provider == "embedded":
        raise LLMConfigError("embedded backend has no base_url: it must be started by the CLI (python -m skillopt_ray)")


def make_client(role_cfg: LLMRoleConfig) -> openai.AsyncOpenAI:
    """Build the SDK client; keys come from the env var the config names."""
    check_client_config(role_cfg)
    key = os.environ.get(role_cfg.api_key_env) if role_cfg.api_key_env else None
    timeout = openai.Timeout(role_cfg.timeout_s, connect=min(role_cfg.connect_timeout_s, role_cfg.timeout_s))
    common: _ClientOptions = {"max_retries": 0, "timeout": timeout, "http_client": _http_client(role_cfg, timeout)}
    if role_cfg.provider == "azure":
        token = os.environ.get(role_cfg.azure_ad_token_env) if role_cfg.azure_ad_token_env else None
        from skillopt_ray.config.routing import resolved_api

        # Azure's Responses API came with the 2025-03-01-preview version; chat keeps the long-standing default
        responses = resolved_api(role_cfg.provider, role_cfg.api, role_cfg.model) == "responses"
        return openai.AsyncAzureOpenAI(
            azure_endpoint=role_cfg.azure_endpoint,
            api_version=role_cfg.azure_api_version or ("2025-04-01-preview" if responses else "2024-10-21"),
            api_key=key or None,
            azure_ad_token=token if not key else None,
            **common,
        )
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


_FIX = {
    400: "the request was rejected; check the model supports these parameters (temperature, max_tokens vs "
    "max_completion_tokens, structured_output, reasoning_effort)",
    401: "check the API key in the environment variable named by llm.<role>.api_key_env",
    403: "the key lacks access to this model or endpoint",
    404: "check the model (deployment) name and base_url",
}

# what to check, per fault kind, when the retries run out
_FAULT_FIX = {
    "http": "the server is failing or overloaded; retry later or raise llm.max_retries / llm.retry_window_s",
    "connect": "check the server is up and reachable at that address",
    "reset": "the connection was dropped mid-request (a proxy, a crash or an overloaded server); check the server",
    "read_timeout": "the server answered nothing within llm.<role>.timeout_s; check it, or raise the timeout for slow models",
    "silent": "the server accepts connections but never answers: check it is the right port and not stuck",
    "truncated": "the response body was cut off (a proxy or the server dropping data); check the server",
    "html": "the endpoint answered with a web page: llm.base_url should be the API root, e.g. http://host:8000/v1",
    "not_json": "the endpoint does not speak the OpenAI API: check llm.base_url",
    "not_completion": "the endpoint's reply is not a chat completion: check llm.base_url and the model name",
}


# how servers word a refusal of image content (OpenAI, vLLM, llama.cpp without a vision projector, ...)
_IMAGE_REFUSAL = re.compile(r"image|vision|multimodal|mmproj|content part|image_url", re.IGNORECASE)


def _parts_of(m: ChatMessage) -> list[ContentPart]:
    content = m.get("content")
    return content if isinstance(content, list) else []


def _has_image(messages: Optional[list[ChatMessage]]) -> bool:
    """Whether a request carries an image content part (a refusal of it gets its own one-line error)."""
    return any(
        isinstance(p, dict) and p.get("type") in ("image_url", "input_image")
        for m in messages or []
        for p in _parts_of(m)
    )


def _error_object(exc: Any) -> JSONObject:
    """The `error` object of an HTTP error's JSON body ({} when there is none)."""
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    err = body.get("error", body)
    return err if isinstance(err, dict) else {}


def _refuses_image(exc: Any, messages: Optional[list[ChatMessage]]) -> bool:
    """An HTTP error to a request with an image, whose message says the image is the problem."""
    if getattr(exc, "status_code", 0) not in (400, 415, 422, 500) or not _has_image(messages):
        return False
    return bool(_IMAGE_REFUSAL.search(str(_error_object(exc).get("message") or "")))


@dataclass
class TransportFault(Exception):
    """A classified transport fault of one attempt."""

    kind: str
    detail: str
    retryable: bool = True
    retry_after: Optional[float] = None
    body_bytes: int = 0  # a 200 whose JSON body was cut off: the bytes that arrived (the endpoint billed the reply)
    billed: bool = False  # a 200 whose body never arrived whole (body_bytes may be 0): billed all the same

    def __str__(self) -> str:
        return self.detail


@dataclass
class Completion:
    """The parts of a chat completion the gateway uses."""

    content: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    tool_calls: list[ToolCall] = field(default_factory=list)
    # parts of the counts above the endpoint reported: reasoning tokens (billed as output) and prompt tokens
    # served from the provider's prompt cache (billed at llm.prices.<model>.cached_input_per_mtok when set)
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    reasoning_summary: str = ""  # the Responses API's reasoning summary, when one was asked for
    # earlier attempts of this call answered with HTTP 200 and a body cut off in transit: billed by the endpoint,
    # never read (the ledger counts them as `unread`, with tokens estimated from the prompt and the bytes received)
    unread: int = 0
    unread_bytes: int = 0


def snippet(text: str, n: int = 60) -> str:
    return " ".join(text.split())[:n]


_snippet = snippet


async def read_body(http: Any, limit_s: float) -> str:
    """The text of an HTTP 200 answer read to its end; a connection that closes (or stalls) half-way through the body
    is a TransportFault carrying the bytes that arrived: the endpoint answered, and so billed, that reply. The whole
    body must arrive within `limit_s` (the role's timeout_s): a body that trickles a byte at a time inside the read
    timeout would otherwise hold the call for ever."""
    got = bytearray()
    deadline = time.monotonic() + limit_s
    chunks = http.aiter_bytes().__aiter__()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(chunks.__anext__(), max(deadline - time.monotonic(), 0.0))
            except StopAsyncIteration:
                break
            got += chunk
    except Exception as exc:  # noqa: BLE001 - whatever the transport raised, the answer's status was 200
        raise _body_fault(http, exc, len(got), limit_s) from exc
    finally:
        await http.aclose()
    return bytes(got).decode(http.charset_encoding or "utf-8", errors="replace")


def _body_fault(http: Any, exc: BaseException, got: int, limit_s: float) -> TransportFault:
    announced = http.headers.get("content-length")
    of = f" of {announced} announced" if announced else ""
    if isinstance(exc, asyncio.TimeoutError):  # our own wall-clock bound
        said = f"did not end within {limit_s:g}s (timeout_s): {got}{of} bytes had arrived"
        return TransportFault("read_timeout", f"HTTP 200 whose body {said}", body_bytes=got, billed=True)
    stalled = "Timeout" in type(exc).__name__
    return TransportFault(
        "read_timeout" if stalled else "truncated",
        f"HTTP 200 whose body {'stalled' if stalled else 'was cut off'} after {got}{of} bytes ({type(exc).__name__})",
        body_bytes=got,
        billed=True,
    )


def decode_json_body(body: str, content_type: str) -> Any:
    """The JSON value of an HTTP 200 body, or the TransportFault that names what came instead (an empty body, a
    web page, text, JSON cut off): the same checks for every API the endpoints speak."""
    stripped = body.strip()
    n = len(body.encode("utf-8", "replace"))
    if not stripped:
        raise TransportFault("not_json", "HTTP 200 with an empty body")
    if "html" in content_type.lower() or stripped[:1] == "<":
        raise TransportFault("html", f"HTTP 200 with an HTML page instead of JSON ({_snippet(stripped)!r})")
    try:
        data = json.loads(stripped)
    except ValueError as e:
        if stripped[:1] in "{[":  # a cut can land anywhere (inside a string, an escape), so one name for both
            raise TransportFault(
                "truncated",
                f"HTTP 200 with a JSON body cut off or broken ({n} bytes; "
                f"{getattr(e, 'msg', e)} at char {getattr(e, 'pos', '?')})",
                body_bytes=n,
                billed=True,
            ) from None
        raise TransportFault(
            "not_json",
            f"HTTP 200 with a body that is not JSON (content-type {content_type or 'none'}: {_snippet(stripped)!r})",
        ) from None
    return data


def _usage_detail(usage: JSONObject, group: str, key: str) -> int:
    return as_int(as_object(usage.get(group)).get(key))


def parse_completion(body: str, content_type: str) -> Completion:
    """The completion in an HTTP 200 body, or the Fault that describes what came instead."""
    data = decode_json_body(body, content_type)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            msg = _snippet(str(data["error"].get("message") or data["error"]), 120)
            raise TransportFault("not_completion", f"HTTP 200 carrying an error object: {msg!r}")
        raise TransportFault("not_completion", "HTTP 200 with JSON that is not a chat completion (no choices)")
    choice = choices[0]
    raw_message = choice.get("message")
    message = as_object(raw_message)
    content = message.get("content")
    if isinstance(content, list):  # some servers send content parts
        content = "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    raw_usage = data.get("usage")
    usage = as_object(raw_usage)
    return Completion(
        content=content if isinstance(content, str) else "",
        finish_reason=str(choice.get("finish_reason") or ""),
        prompt_tokens=as_int(usage.get("prompt_tokens")),
        completion_tokens=as_int(usage.get("completion_tokens")),
        tool_calls=_tool_calls(message.get("tool_calls")),
        reasoning_tokens=_usage_detail(usage, "completion_tokens_details", "reasoning_tokens"),
        cached_tokens=_usage_detail(usage, "prompt_tokens_details", "cached_tokens"),
    )


def _tool_calls(raw: Any) -> list[ToolCall]:
    """A message's function tool calls as plain dicts {id, type, function: {name, arguments}} (arguments a string)."""
    out: list[ToolCall] = []
    for i, call in enumerate(raw if isinstance(raw, list) else []):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            continue
        args = fn.get("arguments")
        if not isinstance(args, str):  # some servers send an object
            args = "" if args is None else json.dumps(args, ensure_ascii=False)
        out.append(
            {
                "id": str(call.get("id") or f"call_{i}"),
                "type": "function",
                "function": {"name": str(fn.get("name") or ""), "arguments": args},
            }
        )
    return out


def _os_reason(exc: Optional[BaseException], depth: int = 4) -> str:
    """The operating system's reason for a failed connect (`Connection refused`), from the cause chain."""
    while exc is not None and depth:
        if isinstance(exc, OSError) and exc.strerror:
            return exc.strerror
        exc = exc.__cause__ or exc.__context__
        depth -= 1
    return ""


def _cause_names(exc: Optional[BaseException], depth: int = 4) -> set[str]:
    """Class names of the exceptions below `exc` in its cause chain."""
    names: set[str] = set()
    while exc is not None and depth:
        exc = exc.__cause__ or exc.__context__
        if exc is not None:
            names.update(c.__name__ for c in type(exc).__mro__)
        depth -= 1
    return names


def classify(exc: BaseException, cfg: LLMRoleConfig) -> TransportFault:
    """A retryable Fault for a transport or server error the SDK raised."""
    if isinstance(exc, TransportFault):
        return exc
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        return TransportFault(
            "http", f"HTTP {code}", retryable=code in (408, 409, 429) or code >= 500, retry_after=_retry_after(exc)
        )
    cause = exc.__cause__ or exc.__context__
    # by class name: the SDK ships its own copy of httpx (httpx2 in openai 3.x)
    kinds = {c.__name__ for c in type(cause).__mro__} if cause is not None else set()
    # under the aiohttp transport the SDK maps a server that hung up mid-answer to httpx's ConnectTimeout; the
    # aiohttp error underneath says what happened
    underneath = _cause_names(cause)
    if (
        underneath & {"ServerDisconnectedError", "ClientPayloadError", "ClientOSError"}
        and "ClientConnectorError" not in underneath
    ):
        return TransportFault("reset", f"connection closed mid-response ({_snippet(str(cause), 80)})")
    if "ClientConnectorError" in underneath and not underneath & {"ServerTimeoutError", "TimeoutError"}:
        # aiohttp: a refused or unreachable address, which the SDK also calls a ConnectTimeout
        return TransportFault("connect", f"cannot connect ({_os_reason(cause) or 'refused'})")
    if isinstance(exc, openai.APITimeoutError) or "TimeoutException" in kinds:
        if kinds & {"ConnectTimeout", "PoolTimeout"}:
            return TransportFault("connect", f"connect timeout after {cfg.connect_timeout_s:g}s")
        return TransportFault("read_timeout", f"no answer within {cfg.timeout_s:g}s (read timeout)")
    if isinstance(exc, openai.APIConnectionError) or "TransportError" in kinds:
        if "ConnectError" in kinds:
            return TransportFault("connect", f"cannot connect ({_snippet(str(cause), 80) or 'refused'})")
        if "RemoteProtocolError" in kinds:
            return TransportFault("reset", f"connection closed mid-response ({_snippet(str(cause), 80)})")
        return TransportFault("reset", f"connection error ({type(cause).__name__ if cause else type(exc).__name__})")
    return TransportFault(
        "not_completion", f"unexpected {type(exc).__name__}: {_snippet(str(exc), 120)}", retryable=False
    )


@dataclass
class RetryPolicy:
    max_retries: int
    base_s: float
    max_s: float
    window_s: float

    @staticmethod
    def from_config(cfg: LLMConfig) -> RetryPolicy:
        return RetryPolicy(cfg.max_retries, cfg.retry_base_s, cfg.retry_max_s, cfg.retry_window_s)


def thinking_fields(cfg: LLMRoleConfig) -> JSONObject:
    """The body fields of a server's own reasoning switch (llm.<role>.thinking, sent as thinking_wire says): vLLM's
    chat-template switch for Qwen, omitted at server_default; MiniMax's `thinking` object, which its M2 models
    always have adaptive (they cannot turn it off) and the others disabled unless asked."""
    if cfg.thinking_wire == "chat_template_kwargs" and cfg.thinking != "server_default":
        return {"chat_template_kwargs": {"enable_thinking": cfg.thinking == "enabled"}}
    if cfg.thinking_wire == "minimax":
        on = cfg.thinking == "enabled" or cfg.model.startswith("MiniMax-M2")
        return {"thinking": {"type": "adaptive" if on else "disabled"}}
    return {}


class WireOptions(TypedDict, total=False):
    security: dict[str, bool]
    headers: dict[str, str]
    extra_json: JSONObject


class WireRequest(TypedDict):
    """The keywords of the SDK client's `post`."""

    cast_to: type
    body: ChatBody
    options: WireOptions


def wire_request(kw: ChatBody, headers: dict[str, str]) -> WireRequest:
    """The keywords of the SDK client's own `post` for a chat completion whose body is `kw` (request_kwargs).

    `chat.completions.create` walks every message against the SDK's typed parameters before it sends them, which
    was the largest share of the gateway's CPU per call (scripts/bench_scale.py); our body is already plain JSON,
    so the client's documented `post` sends it as it is, with the same auth, headers, timeout and status errors,
    and hands back the HTTP response unparsed. The server gets the same JSON, path and headers
    (tests/llm/test_throughput_wire.py)."""
    body = kw.copy()
    body.pop("extra_body", None)
    options: WireOptions = {"security": {"bearer_auth": True}}
    if headers:
        options["headers"] = headers
    if "extra_body" in kw:
        options["extra_json"] = kw["extra_body"]
    return {"cast_to": openai_http_response(), "body": body, "options": options}


def openai_http_response() -> type:
    """The HTTP response class of the SDK's own HTTP library (`cast_to` for an unparsed reply): httpx2 from openai
    3.x on, httpx before."""
    import importlib

    major = int(str(openai.__version__).split(".")[0])
    return importlib.import_module("httpx2" if major >= 3 else "httpx").Response


class RoleEndpoint:
    """Sends chat completions for one role."""

    api = "chat"  # the OpenAI API it speaks (ResponsesEndpoint: responses)

    def __init__(self, role: str, role_cfg: LLMRoleConfig, retry: RetryPolicy, rng_seed: int = 0):
        self.role = role
        self.cfg = role_cfg
        self.retry = retry
        check_client_config(role_cfg)  # a missing key is named when the gateway starts, not at the role's first call
        self._client: Optional[openai.AsyncOpenAI] = None
        self._rng = random.Random(rng_seed)
        self.retries_done = 0
        self.faults: Counter = Counter()  # fault kind -> attempts that hit it
        self._last_answer = 0.0  # monotonic time of the last HTTP answer of any kind
        self._probe: Optional[asyncio.Future] = None

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client, built at the role's first call: each builds its own TLS context and HTTP pool (tens of
        milliseconds of CPU), and an eval never calls the optimizer or the judge."""
        if self._client is None:
            self._client = make_client(self.cfg)
        return self._client

    def prepare(self) -> None:
        self._client = self.client

    def completion_budget(self, req: ChatRequest) -> int:
        return self.cfg.reply_budget(req.max_tokens)

    def request_kwargs(self, req: ChatRequest, budget: Optional[int] = None) -> ChatBody:
        """The request body. temperature only when set; max_completion_tokens instead of max_tokens when configured."""
        kw: ChatBody = {"model": self.cfg.model, "messages": req.messages}
        temperature = self.cfg.temperature if req.temperature is None else req.temperature
        if temperature is not None:
            kw["temperature"] = temperature
        n = budget or self.completion_budget(req)
        if self.cfg.max_reply_tokens:  # the ceiling holds for a retry with a doubled budget too
            n = min(n, self.cfg.max_reply_tokens)
        if self.cfg.max_completion_tokens is not None:
            kw["max_completion_tokens"] = n
        else:
            kw["max_tokens"] = n
        if self.cfg.reasoning_effort and not req.tools:  # the reference sends no reasoning_effort with tools
            kw["reasoning_effort"] = self.cfg.reasoning_effort
        if req.response_format is not None:
            kw["response_format"] = req.response_format
        if req.tools:
            kw["tools"] = req.tools
            kw["tool_choice"] = req.tool_choice or "auto"
        extra = thinking_fields(self.cfg)
        if extra:  # fields outside the OpenAI parameters go through the SDK's extra_body
            kw["extra_body"] = extra
        return kw

    async def _post(self, kw: ChatBody, headers: dict[str, str]) -> Completion:
        # stream=True: the SDK hands back the answer once its status line is in, so a body cut off after a 200 is
        # known for what it is (a billed reply) rather than as a connection error of unknown status
        http = await self.client.post("/chat/completions", **wire_request(kw, headers), stream=True)
        self._last_answer = time.monotonic()
        return parse_completion(await read_body(http, self.cfg.timeout_s), http.headers.get("content-type", ""))

    def probe_request(self) -> tuple[str, JSONObject]:
        """The liveness probe: a call to the route the run's calls use, with `messages` that are not a list, which an
        OpenAI-compatible server refuses before any generation (nothing billed, no queue behind busy slots)."""
        return "/chat/completions", {"model": self.cfg.model, "messages": "liveness probe", "max_tokens": 1}

    async def _probe_once(self) -> bool:
        """Whether the run's route answers at all. GET /models proved less: a server whose /models still answered
        while its chat route hung held each call for the whole timeout_s (121 s at the defaults)."""
        path, body = self.probe_request()
        client = self.client.with_options(timeout=probe_timeout(self.cfg), max_retries=0)
        try:
            await client.post(path, cast_to=openai_http_response(), body=body)
        except (openai.APITimeoutError, openai.APIConnectionError):
            return False
        except Exception:  # noqa: BLE001 - any HTTP answer (400, 404, 401, a page) proves the route is served
            pass
        self._last_answer = time.monotonic()
        return True

    async def _alive(self) -> bool:
        """Whether the endpoint answers anything: a recent answer, else one probe shared by concurrent waiters."""
        if time.monotonic() - self._last_answer < self.cfg.silence_probe_s + probe_timeout(self.cfg):
            return True
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._probe_once())
        return await asyncio.shield(self._probe)

    async def _attempt(self, kw: ChatBody, headers: dict[str, str]) -> Completion:
        task = asyncio.ensure_future(self._post(kw, headers))
        quiet = self.cfg.silence_probe_s
        if quiet and quiet < self.cfg.timeout_s:
            done, _ = await asyncio.wait({task}, timeout=quiet)
            if not done and not await self._alive():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise TransportFault(
                    "silent",
                    f"connection accepted but nothing answered for {quiet:g}s, and a liveness probe "
                    f"(POST {self.probe_request()[0]}) got no answer in {probe_timeout(self.cfg):g}s either",
                    retryable=False,
                )
        return await task

    async def send(self, req: ChatRequest, budget: Optional[int] = None) -> Completion:
        kw = self.request_kwargs(req, budget)
        headers = {}
        if self.cfg.trace_headers:
            headers = {"X-SkillOpt-Role": req.role, "X-SkillOpt-Stage": req.stage, "X-SkillOpt-Key": req.key[:200]}
        start = time.monotonic()
        attempt = unread = unread_bytes = 0
        while True:
            try:
                comp = await self._attempt(kw, headers)
                comp.unread, comp.unread_bytes = unread, unread_bytes
                return comp
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below
                if isinstance(exc, openai.APIStatusError):
                    self._last_answer = time.monotonic()
                fault = classify(exc, self.cfg)
                if isinstance(exc, openai.APIStatusError) and (
                    not fault.retryable or _refuses_image(exc, kw["messages"])
                ):  # llama.cpp without a vision projector refuses an image with HTTP 500: retrying cannot help
                    raise self._rejected(exc, kw["messages"]) from None
                self.faults[fault.kind] += 1
                if fault.billed:
                    unread, unread_bytes = unread + 1, unread_bytes + fault.body_bytes
                elapsed = time.monotonic() - start
                delay = fault.retry_after
                if delay is None:
                    delay = min(self.retry.max_s, self.retry.base_s * (2**attempt))
                    delay *= 0.5 + self._rng.random()  # jitter
                if not fault.retryable or attempt >= self.retry.max_retries or elapsed + delay > self.retry.window_s:
                    raise LLMUnavailable(
                        f"{self.role} endpoint unavailable at {describe(self.cfg)}: {fault.detail} "
                        f"({attempt + 1} attempt{'s' if attempt else ''} in {elapsed:.0f}s); {self._advice(fault, attempt)}",
                        unread,
                        unread_bytes,
                    ) from None
                attempt += 1
                self.retries_done += 1
                await asyncio.sleep(delay)

    def _advice(self, fault: TransportFault, attempt: int) -> str:
        """What to change, given why the retries stopped (the fault kind, the attempt cap or the window)."""
        fix = _FAULT_FIX.get(fault.kind, "")
        if fault.kind == "read_timeout":
            fix = (
                f"the server answered nothing within llm.{self.role}.timeout_s={self.cfg.timeout_s:g}; check it, or raise "
                f"llm.{self.role}.timeout_s for slow models"
            )
            if self.cfg.timeout_s >= self.retry.window_s:
                fix += f" and llm.retry_window_s (now {self.retry.window_s:g}, so a timed-out call is never retried) above it"
        elif fault.kind == "http" and fault.retryable:
            fix = "the server is failing or overloaded; retry later or raise " + (
                f"llm.max_retries (now {self.retry.max_retries})"
                if attempt >= self.retry.max_retries
                else f"llm.retry_window_s (now {self.retry.window_s:g})"
            )
        return fix

    def _rejected(self, exc: openai.APIStatusError, kw_messages: Optional[list[ChatMessage]] = None) -> Exception:
        code = exc.status_code
        err = _error_object(exc)
        server_msg = _snippet(str(err.get("message") or ""), 200)
        said = f" (server: {server_msg})" if server_msg else ""
        if code == 400 and "content_filter" in (str(err.get("code") or "") + str(err.get("type") or "")):
            return ReplyFiltered(f"{self.role} request refused by the content filter at {describe(self.cfg)}{said}")
        if _refuses_image(exc, kw_messages):
            return LLMRequestRejected(
                f"{self.role} model at {describe(self.cfg)} rejects image input (HTTP {code}){said}: use a model that "
                "accepts images, or send DocVQA pages as their text layer (env.options.page_input=text)"
            )
        if code == 401 and self.cfg.api_key_env:
            return LLMRequestRejected(
                f"{self.role} call rejected with HTTP 401 by {describe(self.cfg)}{said}: set the environment variable "
                f"{self.cfg.api_key_env} to the server's key (llm.{self.role}.api_key_env names it)"
            )
        if context_overflow(code, err, server_msg):
            return LLMRequestRejected(
                f"{self.role} call rejected with HTTP {code} by {describe(self.cfg)}{said}: "
                f"{context_advice(self.role, self.cfg)}"
            )
        return LLMRequestRejected(
            f"{self.role} call rejected with HTTP {code} by {describe(self.cfg)}{said}: {_FIX.get(code, 'see the provider documentation')}"
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
