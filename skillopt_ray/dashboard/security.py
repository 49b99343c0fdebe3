"""Who may talk to the dashboard: a token, a Host allow-list, and same-origin JSON for anything that changes state.

A page on any other site can make the user's browser send requests to 127.0.0.1, and a DNS name that rebinds to
127.0.0.1 reaches it too, so listening on loopback alone protects nothing. Like Jupyter's and MLflow's servers, every
request must name an allowed Host, every `/api/*` call must carry the token printed at start-up as an
`Authorization: Bearer` header, and a POST must be JSON sent from the page's own origin (a cross-site form can only
send `text/plain`, urlencoded or multipart bodies). The page keeps the token its URL brought in the tab's
sessionStorage, which belongs to its origin, port included: a cookie would not do, since browsers send a cookie for
127.0.0.1 to every port of it, so any local user's server on another port would receive it.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARD = ("0.0.0.0", "::", "")
# Sent with every answer. The page is its own files and JSON from this server, so the policy allows nothing else: no
# inline or foreign script (text from a run directory can never run as script, even if it reached the page as
# HTML), no inline style attributes, no framing by another site.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    return host.strip("[]").lower() in LOOPBACK or host.startswith("127.")


def host_name(value: str) -> str:
    """The name part of a Host header or netloc (`[::1]:8765` -> `::1`, `Example:80` -> `example`)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass(frozen=True)
class Guard:
    """The dashboard's access rules: its token and the host names it answers to."""

    token: str
    hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def make(cls, token: Optional[str], bind_host: str, allowed: Iterable[str] = ()) -> Guard:
        names = {*LOOPBACK, *(host_name(h) for h in allowed if h.strip())}
        if bind_host not in WILDCARD:
            names.add(host_name(bind_host))
        return cls(token or new_token(), frozenset(names))

    def host_ok(self, host_header: str) -> bool:
        return bool(host_header) and host_name(host_header) in self.hosts

    def token_ok(self, given: Optional[str]) -> bool:
        return bool(given) and hmac.compare_digest(str(given).encode(), self.token.encode())

    def origin_ok(self, origin: str, scheme: str, host_header: str, port: int) -> bool:
        """The page's own origin, or an allowed host name on the port this server answers on."""
        if origin == f"{scheme}://{host_header}":
            return True
        try:
            parts = urlsplit(origin)
            origin_port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        return parts.scheme == scheme and (parts.hostname or "") in self.hosts and origin_port == port


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _bearer(headers: dict[str, str]) -> Optional[str]:
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str


class GuardMiddleware:
    """ASGI middleware applying a Guard to every HTTP request before the app sees it."""

    def __init__(self, app: ASGIApp, guard: Guard):
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        send = _with_headers(send, SECURITY_HEADERS)
        port = int((scope.get("server") or ("", 0))[1] or 0)
        refusal = self.refusal(scope, headers, port)
        if refusal is not None:
            await _send_json(send, refusal.status, {"error": refusal.message})
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope, headers: dict[str, str], port: int) -> Optional[Refusal]:
        """Why this request is refused (status and a one-line reason), or None to let it through."""
        g = self.guard
        host = headers.get("host", "")
        if not g.host_ok(host):
            return Refusal(
                403, f"Host {host!r} is not allowed; start the dashboard with --allowed-hosts NAME to add it"
            )
        origin = headers.get("origin")
        if origin is not None and not g.origin_ok(origin, scope.get("scheme", "http"), host, port):
            return Refusal(403, f"requests from origin {origin!r} are refused; use the dashboard's own page")
        site = headers.get("sec-fetch-site", "same-origin")  # a browser's own word on who made the request
        if scope["path"].startswith("/api/") and site not in ("same-origin", "none"):
            return Refusal(403, f"a {site} request is refused; use the dashboard's own page")
        if scope["method"] == "POST":
            ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                return Refusal(415, "send the body as JSON with Content-Type: application/json")
        if scope["path"].startswith("/api/"):
            if not g.token_ok(_bearer(headers)):
                return Refusal(
                    401, "missing or wrong token: open the URL the dashboard printed (it ends in ?token=...)"
                )
        return None


def _with_headers(send: Send, extra: Iterable[tuple[bytes, bytes]]) -> Send:
    """`send` that adds these headers to the response start."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    return wrapped


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
