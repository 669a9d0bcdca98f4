"""The access policy, enforced in front of Prefect's API app in the server process.

The identity proxy authenticates every person and machine, removes any identity header a client
sent, sets ``X-Compliance-User`` and adds the server's auth string. So a request that carries the
auth string and an identity comes through the proxy, and the person's roles
(``deployments/access.py``) decide it; one with the auth string and no identity comes from the
server's own processes. Without the auth string Prefect refuses the request itself. Block secrets
are never served to a person. Each person's request is logged with the person and the status.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from deployments.access import AccessPolicy
from deployments.auth import SERVER_AUTH_ENV, check_auth_string
from deployments.decisions import Decisions, Refused
from deployments.identity import REALM, Verifier, read_people
from write_engine.attestation import DECISION_KEY_ROUTE, public_key_text, signing_key

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

IDENTITY_HEADER = "x-compliance-user"
SETTINGS_PATH = "/api/admin/settings"
#: what probes reach without signing in
OPEN_PATHS = frozenset({"/api/health", "/api/ready"})
#: Prefect's API reference, which its app serves to anyone outside /api (the whole schema and
#: the version): only the server's own processes get it
SCHEMA_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
#: a websocket whose client has not sent its first message (Prefect's auth) by then is closed
WEBSOCKET_AUTH_SECONDS = 10.0
URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.-]*://[^/@:\s]*:)[^@/\s]+@", re.IGNORECASE)
#: the server's public key for attested decisions (served by the gatekeeper itself)
DECISION_KEY_PATH = "/api" + DECISION_KEY_ROUTE
RESUME = re.compile(r"/api/flow_runs/[0-9a-fA-F-]{36}/resume")
CREATE_RUN = re.compile(r"/api/deployments/[0-9a-fA-F-]{36}/create_flow_run")
#: websocket close code for a refused connection (RFC 6455: policy violation)
POLICY_VIOLATION = 1008
_log = logging.getLogger("compliance.access")
DEFAULT_KEY_FILE = "compliance-decision-signing-key"
#: how often the server's own calls ask again while Prefect answers 503 (SQLite locked by
#: another writer), waiting 0.25 s, 0.5 s, 1 s, 2 s, 2 s ... between them
BUSY_TRIES = 8


class BusyRetry(httpx.AsyncBaseTransport):
    """Asks again while the server answers 503: a locked SQLite is busy, not a verdict, and a
    decision or a requester record must not fail on it (the request body is bytes, so it can
    be sent again)."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, tries: int = BUSY_TRIES, first_pause: float = 0.25
    ) -> None:
        self.inner, self.tries, self.first_pause = inner, tries, first_pause

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(self.tries - 1):
            response = await self.inner.handle_async_request(request)
            if response.status_code != 503:
                return response
            await response.aclose()
            _log.info("%s %s: busy (503), asking again", request.method, request.url.path)
            await asyncio.sleep(min(self.first_pause * 2**attempt, 8 * self.first_pause))
        return await self.inner.handle_async_request(request)


class Gatekeeper:
    """ASGI middleware: ``Gatekeeper(app, policy, auth_string)``."""

    def __init__(
        self,
        app: ASGIApp,
        policy: AccessPolicy,
        auth_string: str | None,
        signing_key: Ed25519PrivateKey | None = None,
        people: Verifier | None = None,
        websocket_auth_seconds: float = WEBSOCKET_AUTH_SECONDS,
    ) -> None:
        self.app = app
        self.policy = policy
        self.websocket_auth_seconds = websocket_auth_seconds
        self._expected = _basic(auth_string) if auth_string else None
        #: people signing in here, without a proxy in front (``COMPLIANCE_PEOPLE_FILE``)
        self.people = people
        self.signing_key = signing_key or Ed25519PrivateKey.generate()
        self.decisions = Decisions(self.signing_key, self._as_server)

    def _as_server(self) -> httpx.AsyncClient:
        """This server's own API, in process, as the server (the decisions' reads and writes),
        asking again while it is busy."""
        headers = {"Authorization": self._expected} if self._expected else {}
        transport = BusyRetry(httpx.ASGITransport(app=self.app))
        return httpx.AsyncClient(transport=transport, base_url="http://server/api", headers=headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            receive = _first_message_within(receive, send, self.websocket_auth_seconds)
        headers = _headers(scope)
        if self.people is not None and not self._from_proxy(headers):
            signed_in = self._signed_in(scope, headers)
            if signed_in is None:
                if scope["type"] == "http" and path not in OPEN_PATHS:
                    await _challenge(send)
                    return
            else:
                scope, headers = signed_in
        person = headers.get(IDENTITY_HEADER, "").strip()
        server = self._expected is None or self._from_proxy(headers)
        if path in SCHEMA_PATHS and (person or not server or self._expected is None):
            await _respond(send, 404, {"detail": "Not Found"})
            return
        if path == DECISION_KEY_PATH and server and not person:
            await _respond(send, 200, self._signing())
            return
        if not person or not self._from_proxy(headers):
            await self.app(scope, receive, send)  # the server's own process, or Prefect refuses
            return
        if path.endswith("/ui-settings"):  # signed in at the proxy: no Prefect login in the UI
            await self.app(_uncompressed(scope), receive, _without_ui_login(send))
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
        send = _logging_send(send, person, method, path)
        if path == DECISION_KEY_PATH:
            await _respond(send, 200, self._signing())
        elif path == SETTINGS_PATH:  # the UI reads it on every page: no password in a URL
            await self.app(_uncompressed(scope), receive, _rewritten(send, _without_passwords))
        elif method == "POST" and RESUME.fullmatch(path):
            await self._resume(scope, receive, send, person, path.split("/")[3], parsed)
        elif method == "POST" and _starts_a_run(path, parsed):
            await self._start_run(scope, receive, send, person)
        else:
            await self.app(scope, receive, send)

    async def _resume(
        self, scope: Scope, receive: Receive, send: Send, person: str, run_id: str, body: Any
    ) -> None:
        """A decision on a run waiting for approval is checked and signed before Prefect resumes
        the run; a refused one leaves the run waiting."""
        run_input = body.get("run_input") if isinstance(body, dict) else None
        try:
            await self.decisions.decide(run_id, person, run_input)
        except Refused as refused:
            _log.warning("refused %s's decision on flow run %s: %s", person, run_id, refused)
            await _refuse(scope, send, str(refused))
            return
        await self.app(scope, receive, send)

    async def _start_run(self, scope: Scope, receive: Receive, send: Send, person: str) -> None:
        """The run is created, then who started it is kept (signed); if that cannot be kept,
        the run is deleted again and the person told to retry."""
        kept: list[Message] = []

        async def hold(message: Message) -> None:
            kept.append(message)

        await self.app(_uncompressed(scope), receive, hold)  # its answer is read here
        status = kept[0].get("status") if kept else None
        created = _json(b"".join(m.get("body", b"") for m in kept[1:])) if status == 201 else None
        if isinstance(created, dict) and created.get("id"):
            try:
                await self.decisions.record_requester(str(created["id"]), person)
            except Exception:
                _log.exception("the requester of flow run %s was not kept", created["id"])
                async with self._as_server() as api:
                    await api.delete(f"/flow_runs/{created['id']}")
                await _respond(send, 503, {"detail": "the run could not be recorded; try again"})
                return
        for message in kept:
            await send(message)

    def _signing(self) -> dict[str, Any]:
        """The server's decision key; decisions must carry its signature wherever the policy
        names people (they sign in at the proxy)."""
        return {
            "public_key": public_key_text(self.signing_key),
            "required": bool(self.policy.people),
        }

    def _signed_in(
        self, scope: Scope, headers: dict[str, str]
    ) -> tuple[Scope, dict[str, str]] | None:
        """The request as the proxy would pass it, if it carries a person's own name and
        password (HTTP Basic) from the people file; None if not."""
        assert self.people is not None and self._expected is not None
        person = self.people.identity(headers.get("authorization"))
        if person is None:
            return None
        kept = [
            (k, v)
            for k, v in scope["headers"]
            if k.lower() not in (b"authorization", IDENTITY_HEADER.encode())
        ]
        kept += [
            (b"authorization", self._expected.encode()),
            (IDENTITY_HEADER.encode(), person.encode()),
        ]
        scope = {**scope, "headers": kept}
        return scope, _headers(scope)

    def _from_proxy(self, headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        return self._expected is not None and hmac.compare_digest(given, self._expected)

    def _refusal(self, person: str, method: str, path: str, scope: Scope, body: Any) -> str | None:
        if _asks_for_secrets(scope, body):
            return "block secrets are never served through the proxy"
        overridden = _job_variables(method, path, body)
        if overridden and not self.policy.rule_for(person, "PATCH", path.rsplit("/", 1)[0]):
            return (
                f"job_variables {sorted(overridden)}: only who may edit the deployment may set "
                "a run's job variables (they choose the command and environment a worker runs)"
            )
        if self.policy.rule_for(person, method, path, body if isinstance(body, dict) else None):
            return None
        roles = ", ".join(sorted(self.policy.roles_of(person))) or "no role"
        return f"{person} ({roles}) may not {method} {path} (the access policy, docs/access.md)"

    def _needs_body(self, person: str, method: str, path: str) -> bool:
        """The body decides: a rule's field condition, a block read that may ask secrets, a
        decision, or a run created for a deployment."""
        blocks = "/block_documents" in path or "/block_types" in path
        runs = method == "POST" and (
            bool(RESUME.fullmatch(path) or CREATE_RUN.fullmatch(path))
            or path.rstrip("/") == "/api/flow_runs"
        )
        return blocks or runs or self.policy.needs_body(person, method, path)

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


def _uncompressed(scope: Scope) -> Scope:
    """The request without ``Accept-Encoding``: Prefect's app then answers plain JSON, which
    the gatekeeper reads (a person's client gets it as it is)."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]
    return {**scope, "headers": headers}


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


def _first_message_within(receive: Receive, send: Send, seconds: float) -> Receive:
    """Prefect waits for a websocket's first message (its auth) with no time limit, so a
    stranger could hold any number of sockets open: after ``seconds`` without it the socket is
    closed (1008) and the app told the client left."""
    connected = waiting = False

    async def wrapped() -> Message:
        nonlocal connected, waiting
        if not connected or not waiting:
            message = await receive()
            connected = connected or message.get("type") == "websocket.connect"
            waiting = connected and message.get("type") == "websocket.connect"
            return message
        try:
            message = await asyncio.wait_for(receive(), seconds)
        except TimeoutError:
            reason = f"no auth message within {seconds:g} s"
            await send({"type": "websocket.close", "code": POLICY_VIOLATION, "reason": reason})
            return {"type": "websocket.disconnect", "code": POLICY_VIOLATION}
        waiting = False
        return message

    return wrapped


async def _refuse(scope: Scope, send: Send, reason: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": POLICY_VIOLATION, "reason": reason[:120]})
        return
    await _respond(send, 403, {"detail": reason})


async def _challenge(send: Send) -> None:
    """401 with a Basic challenge: the browser asks for the person's name and password."""
    payload = b'{"detail": "sign in with your own name and password"}'
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"www-authenticate", f'Basic realm="{REALM}", charset="UTF-8"'.encode()),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _respond(send: Send, status: int, content: Any) -> None:
    payload = json.dumps(content).encode()
    length = str(len(payload)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", length)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _starts_a_run(path: str, body: Any) -> bool:
    """A deployment's run, from its Run button or the flow-runs endpoint."""
    if CREATE_RUN.fullmatch(path):
        return True
    creates = path.rstrip("/") == "/api/flow_runs" and isinstance(body, dict)
    return creates and bool(body.get("deployment_id"))


def _job_variables(method: str, path: str, body: Any) -> dict[str, Any]:
    """The job variables a deployment's run is created with (the UI's Custom run sends ``{}``):
    the process work pool takes the worker's ``command`` and ``env`` from them."""
    if method != "POST" or not CREATE_RUN.fullmatch(path) or not isinstance(body, dict):
        return {}
    overridden = body.get("job_variables")
    return overridden if isinstance(overridden, dict) else {}


def _without_ui_login(send: Send) -> Send:
    """The UI's settings with ``auth`` unset: the UI asks for no password, and its calls carry
    the proxy's sign-in (a cookie, or the browser's Basic credentials) instead."""
    return _rewritten(send, lambda settings: {**settings, "auth": None})


def _without_passwords(value: Any) -> Any:
    """Prefect hides its secret settings; a URL's password (a Redis or docket URL) it shows."""
    if isinstance(value, dict):
        return {key: _without_passwords(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_passwords(item) for item in value]
    if isinstance(value, str):
        return URL_PASSWORD.sub(r"\1********@", value)
    return value


def _rewritten(send: Send, change: Callable[[Any], Any]) -> Send:
    """The JSON object answered, changed by ``change`` (other answers pass as they are)."""
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
        answer = _json(body)
        if isinstance(answer, dict):
            body = json.dumps(change(answer)).encode()
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


def install(
    policy: AccessPolicy, key_file: Path | None = None, people_file: Path | None = None
) -> None:
    """Wrap the app every ``prefect server start`` in this process serves; decisions are signed
    with the key in ``key_file`` (default: in PREFECT_HOME; API replicas must share one)."""
    from prefect.server.api import server
    from prefect.settings import get_current_settings

    if getattr(server.create_app, "_gatekept", False):
        return
    original = server.create_app
    if not _log.handlers:  # the server's log names each person's request
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        _log.addHandler(handler)
        _log.setLevel(logging.INFO)
        _log.propagate = False  # once, not again through Prefect's handlers

    def create_app(*args: Any, **kwargs: Any) -> Any:
        settings = get_current_settings()
        auth = settings.server.api.auth_string
        secret = auth.get_secret_value() if auth is not None else None
        if secret is not None:  # a weak string would be the one key to everything
            check_auth_string(secret, SERVER_AUTH_ENV)
        key = signing_key(key_file or Path(settings.home) / DEFAULT_KEY_FILE)
        people = Verifier(read_people(people_file)) if people_file and secret else None
        return Gatekeeper(original(*args, **kwargs), policy, secret, key, people)

    create_app._gatekept = True  # type: ignore[attr-defined]
    server.create_app = create_app
