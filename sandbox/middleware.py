"""The request pipeline every API call goes through, as a plain ASGI middleware (cheap per call).

Order: count the route, add injected latency, fail with an injected error, then (data routes)
check the bearer token and its scopes; finally count the response status. Control routes under
``/_sandbox/`` bypass all of it and are never counted.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.routing import BaseRoute, Route

from sandbox.errors import ApiError, OAuthError, api_error_response, oauth_error_response
from sandbox.scopes import missing_scopes
from sandbox.state import Tier

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DATA = "data"
TOKEN = "token"
OTHER = "other"
TOKEN_ROUTES = ("POST /oauth/token", "POST /v1/oauth/token/suspend")


class RouteTable:
    """``METHOD /template`` for a request, found without running the router."""

    def __init__(self, routes: list[BaseRoute]) -> None:
        self.entries: list[tuple[str, re.Pattern[str], str, str]] = []
        for route in routes:
            if not isinstance(route, Route) or route.path.startswith("/_sandbox"):
                continue
            for method in sorted(route.methods or ()):
                if method == "HEAD":
                    continue
                key = f"{method} {route.path}"
                if key in TOKEN_ROUTES:
                    kind = TOKEN
                elif route.path.startswith("/v1/"):
                    kind = DATA
                else:
                    kind = OTHER
                self.entries.append((method, route.path_regex, key, kind))
        self.keys = {key for _, _, key, _ in self.entries}

    def match(self, method: str, path: str) -> tuple[str, str] | None:
        for entry_method, regex, key, kind in self.entries:
            if entry_method == method and regex.match(path):
                return key, kind
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class SandboxMiddleware:
    def __init__(self, app: ASGIApp, tier: Tier, table_source: Callable[[], RouteTable]) -> None:
        self.app = app
        self.tier = tier
        self._table_source = table_source
        self._table: RouteTable | None = None

    @property
    def table(self) -> RouteTable:
        if self._table is None:
            self._table = self._table_source()
        return self._table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/_sandbox"):
            await self.app(scope, receive, send)
            return
        stats = self.tier.stats
        status = [500]

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        stats.requests_total += 1
        try:
            matched = self.table.match(scope["method"], scope["path"])
            if matched is None:
                await self.app(scope, receive, counting_send)
                return
            key, kind = matched
            stats.route_counts[key] += 1
            delay, fail = self.tier.faults.decide(key, kind == DATA)
            if delay:
                await asyncio.sleep(delay)
            if fail is not None:
                stats.faults_injected += 1
                await self._fault(fail, kind)(scope, receive, counting_send)
                return
            if kind == DATA:
                try:
                    token = self.tier.tokens.authenticate_bearer(_header(scope, b"authorization"))
                    needed = missing_scopes(key, token.scopes)
                    if needed is not None:
                        raise ApiError(
                            403,
                            "insufficient_scope",
                            f"{key} needs one of the scopes: {', '.join(needed)}",
                        )
                except ApiError as exc:
                    if exc.status == 401:
                        stats.unauthorized += 1
                        exc.headers.setdefault("WWW-Authenticate", 'Bearer error="invalid_token"')
                    else:
                        stats.forbidden += 1
                    await api_error_response(exc)(scope, receive, counting_send)
                    return
                scope.setdefault("state", {})["token"] = token
            await self.app(scope, receive, counting_send)
        finally:
            stats.status_counts[str(status[0])] += 1

    @staticmethod
    def _fault(status: int, kind: str) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        headers = {"Retry-After": "1"} if status in (429, 503) else {}
        message = f"injected fault: the sandbox answers {status} for this call"
        if kind == TOKEN:
            code = "temporarily_unavailable" if status >= 500 else "rate_limited"
            return oauth_error_response(OAuthError(status, code, message, headers))
        code = "service_unavailable" if status >= 500 else "injected_error"
        return api_error_response(ApiError(status, code, message, headers))
