"""The access policy, enforced in front of Prefect's API app in the server process.

The identity proxy authenticates every person and machine, removes any identity header a client
sent, sets ``X-Compliance-User`` and adds the server's auth string. So a request that carries the
auth string and an identity comes through the proxy, and the person's roles
(``deployments/access.py``) decide it; one with the auth string and no identity comes from the
server's own processes. Without the auth string Prefect refuses the request itself. Block secrets
are never served to a person. Each person's request is logged with the person and the status.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from deployments.access import AccessPolicy

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

IDENTITY_HEADER = "x-compliance-user"
#: websocket close code for a refused connection (RFC 6455: policy violation)
POLICY_VIOLATION = 1008
_log = logging.getLogger("compliance.access")


class Gatekeeper:
    """ASGI middleware: ``Gatekeeper(app, policy, auth_string)``."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, auth_string: str | None) -> None:
        self.app = app
        self.policy = policy
        self._expected = _basic(auth_string) if auth_string else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        person = headers.get(IDENTITY_HEADER, "").strip()
        if not person or not self._from_proxy(headers):
            await self.app(scope, receive, send)  # the server's own process, or Prefect refuses
            return
        if path.endswith("/ui-settings"):  # signed in at the proxy: no Prefect login in the UI
            plain = [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]
            await self.app({**scope, "headers": plain}, receive, _without_ui_login(send))
            return
        if not path.startswith("/api/"):
            await self.app(scope, receive, send)
            return
        method = "WS" if scope["type"] == "websocket" else scope["method"]
        body: bytes | None = None
        if method != "WS" and self._needs_body(person, method, path):
            body, receive = await _buffered(receive)
        parsed = _json(body)
        refusal = self._refusal(person, method, path, scope, parsed)
        if refusal is not None:
            _log.warning("refused %s %s %s: %s", person, method, path, refusal)
            await _refuse(scope, send, refusal)
            return
        if method == "WS":
            receive = self._authenticated_socket(receive)
        await self.app(scope, receive, _logging_send(send, person, method, path))

    def _from_proxy(self, headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        return self._expected is not None and hmac.compare_digest(given, self._expected)

    def _refusal(self, person: str, method: str, path: str, scope: Scope, body: Any) -> str | None:
        if _asks_for_secrets(scope, body):
            return "block secrets are never served through the proxy"
        if self.policy.rule_for(person, method, path, body if isinstance(body, dict) else None):
            return None
        roles = ", ".join(sorted(self.policy.roles_of(person))) or "no role"
        return f"{person} ({roles}) may not {method} {path} (deployments/access_policy.yaml)"

    def _needs_body(self, person: str, method: str, path: str) -> bool:
        """The body decides: a rule's field condition, or a block read that may ask secrets."""
        blocks = "/block_documents" in path or "/block_types" in path
        return blocks or self.policy.needs_body(person, method, path)

    def _authenticated_socket(self, receive: Receive) -> Receive:
        """Prefect's websockets wait for ``{"type": "auth", "token": …}``: a person's client
        sends its own credential there, which the proxy checked; Prefect gets its string."""
        expected = self._expected
        first = True

        async def wrapped() -> Message:
            nonlocal first
            message = await receive()
            if first and message.get("type") == "websocket.receive" and message.get("text"):
                first = False
                auth = _json(message["text"].encode())
                if isinstance(auth, dict) and auth.get("type") == "auth" and expected:
                    token = base64.b64decode(expected.removeprefix("Basic ")).decode()
                    message = {**message, "text": json.dumps({"type": "auth", "token": token})}
            return message

        return wrapped


def _basic(auth_string: str) -> str:
    return "Basic " + base64.b64encode(auth_string.encode()).decode()


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a ``receive`` that hands it to the app again."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _json(body: bytes | None) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def _asks_for_secrets(scope: Scope, body: Any) -> bool:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if any(value.lower() == "true" for value in query.get("include_secrets", [])):
        return True
    return isinstance(body, dict) and body.get("include_secrets") is True


async def _refuse(scope: Scope, send: Send, reason: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": POLICY_VIOLATION, "reason": reason[:120]})
        return
    payload = json.dumps({"detail": reason}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _without_ui_login(send: Send) -> Send:
    """The UI's settings with ``auth`` unset: the UI asks for no password, and its calls carry
    the proxy's sign-in (a cookie, or the browser's Basic credentials) instead."""
    start: Message | None = None
    chunks: list[bytes] = []

    async def wrapped(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
            return
        if message["type"] != "http.response.body" or start is None:
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body"):
            return
        body = b"".join(chunks)
        settings = _json(body)
        if isinstance(settings, dict) and "auth" in settings:
            body = json.dumps({**settings, "auth": None}).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return wrapped


def _logging_send(send: Send, person: str, method: str, path: str) -> Send:
    """Log the person's request with its status (reads at DEBUG, everything else at INFO)."""

    async def wrapped(message: Message) -> None:
        if message["type"] in ("http.response.start", "websocket.accept"):
            status = message.get("status", 101)
            level = logging.DEBUG if method == "GET" else logging.INFO
            _log.log(level, "%s %s %s -> %s", person, method, path, status)
        await send(message)

    return wrapped


def install(policy: AccessPolicy) -> None:
    """Wrap the app every ``prefect server start`` in this process serves."""
    from prefect.server.api import server
    from prefect.settings import get_current_settings

    if getattr(server.create_app, "_gatekept", False):
        return
    original = server.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        auth = get_current_settings().server.api.auth_string
        secret = auth.get_secret_value() if auth is not None else None
        return Gatekeeper(original(*args, **kwargs), policy, secret)

    create_app._gatekept = True  # type: ignore[attr-defined]
    server.create_app = create_app
