"""OAuth state of one tier: access and refresh tokens, authorization codes, the token budget.

Rules enforced (§5, §7, §8 of the specification):

* one active access token per application (per ``source_id`` for public apps): a new mint
  revokes the previous token, which then gets 401;
* tokens expire after ``token_ttl_seconds`` (3599) on the sandbox clock;
* 5 token-endpoint requests per application in any sliding 60 s window, shared by mint,
  refresh and suspend; the sixth gets 429 with ``Retry-After`` = seconds until a slot frees.
  Every call counts, malformed ones included (form-encoded, wrong secret, unknown grant...),
  charged to the client_id it names; calls naming none share one budget of their own. Calls
  answered 429 do not take a slot; outage failures happen before the limiter;
* authorization codes live 30 s and are single-use;
* refresh rotates: each refresh returns a new refresh token, and the one used stays valid for
  3 hours after its first use;
* rotating a client_credentials app's secret revokes its token; public apps' customer tokens
  survive rotation;
* suspend revokes a public app's customer connection (access and refresh tokens).
"""

from __future__ import annotations

import math
import secrets
from collections import deque
from dataclasses import dataclass, field

from sandbox.apps import Application, AppRegistry
from sandbox.clock import Clock
from sandbox.errors import ApiError, OAuthError
from sandbox.stats import Stats

CODE_TTL_SECONDS = 30.0
REFRESH_REUSE_SECONDS = 3 * 3600.0
RATE_WINDOW_SECONDS = 60.0

SUPERSEDED = "access token was superseded by a newer token minted for this application"


@dataclass
class AccessToken:
    value: str
    app: Application
    source_id: str | None
    scopes: frozenset[str]
    expires_at: float
    secret_generation: int
    revoked: str | None = None


@dataclass
class RefreshToken:
    value: str
    client_id: str
    source_id: str
    scopes: frozenset[str]
    first_used_at: float | None = None
    revoked: bool = False


@dataclass
class AuthorizationCode:
    value: str
    client_id: str
    redirect_uri: str
    scopes: frozenset[str]
    source_id: str
    issued_at: float
    used: bool = False


@dataclass
class TokenService:
    tier: str
    registry: AppRegistry
    clock: Clock
    stats: Stats
    ttl_seconds: int = 3599
    rate_limit: int = 5
    access: dict[str, AccessToken] = field(default_factory=dict)
    current: dict[tuple[str, str | None], str] = field(default_factory=dict)
    refresh_tokens: dict[str, RefreshToken] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    #: request times per client_id; the key None holds calls that name no client_id
    windows: dict[str | None, deque[float]] = field(default_factory=dict)

    def reset(self) -> None:
        self.access.clear()
        self.current.clear()
        self.refresh_tokens.clear()
        self.codes.clear()
        self.windows.clear()

    # ------------------------------------------------------------- client checks
    def consume_budget(self, client_id: str | None) -> None:
        """Take a slot of ``client_id``'s budget, or raise 429 with ``Retry-After``.

        ``None`` is a call that names no client_id (no body, not JSON, client_id missing or not
        a string): it cannot be charged to an application, so all such calls of this tier share
        one budget of the same size. A client looping on malformed calls meets 429 as it would
        against the real service, and no application pays for a call it may not have made.
        """
        now = self.clock.now()
        window = self.windows.setdefault(client_id, deque())
        while window and window[0] <= now - RATE_WINDOW_SECONDS:
            window.popleft()
        if len(window) >= self.rate_limit:
            retry_after = max(1, math.ceil(window[0] + RATE_WINDOW_SECONDS - now))
            whose = "for this application" if client_id else "that name no client_id"
            raise OAuthError(
                429,
                "rate_limited",
                f"more than {self.rate_limit} token-endpoint requests in 60 seconds {whose}; "
                f"retry in {retry_after} s",
                {"Retry-After": str(retry_after)},
            )
        window.append(now)

    def authenticate_client(self, client_id: str, client_secret: object) -> Application:
        app = self.registry.get(client_id)
        if app is None or app.tier != self.tier or not isinstance(client_secret, str):
            raise OAuthError(401, "invalid_client", "unknown client_id or wrong client_secret")
        if not secrets.compare_digest(app.client_secret.encode(), client_secret.encode()):
            raise OAuthError(401, "invalid_client", "unknown client_id or wrong client_secret")
        return app

    def check_scopes(self, app: Application, scope: object) -> frozenset[str]:
        if scope is None:
            raise OAuthError(400, "invalid_request", "scope is required (space-separated scopes)")
        if not isinstance(scope, str) or not scope.split():
            raise OAuthError(
                400, "invalid_scope", "scope must be a non-empty space-separated string"
            )
        requested = scope.split()
        refused = [s for s in requested if s not in app.allowed_scopes]
        if refused:
            raise OAuthError(
                400,
                "invalid_scope",
                f"scope {' '.join(refused)} is not allowed for {app.app_type} applications",
            )
        return frozenset(requested)

    # ------------------------------------------------------------- minting
    def mint(self, app: Application, source_id: str | None, scopes: frozenset[str]) -> AccessToken:
        key = (app.client_id, source_id)
        previous = self.current.get(key)
        if previous is not None:
            self.access[previous].revoked = SUPERSEDED
        token = AccessToken(
            value=secrets.token_urlsafe(32),
            app=app,
            source_id=source_id,
            scopes=scopes,
            expires_at=self.clock.now() + self.ttl_seconds,
            secret_generation=app.secret_generation,
        )
        self.access[token.value] = token
        self.current[key] = token.value
        self.stats.token_mints[app.client_id] += 1
        return token

    def new_refresh_token(self, app: Application, source_id: str, scopes: frozenset[str]) -> str:
        value = secrets.token_urlsafe(48)
        self.refresh_tokens[value] = RefreshToken(value, app.client_id, source_id, scopes)
        return value

    def grant_response(self, token: AccessToken, refresh: str | None = None) -> dict[str, object]:
        body: dict[str, object] = {
            "access_token": token.value,
            "expires_in": self.ttl_seconds,
            "token_type": "Bearer",
        }
        if refresh is not None:
            body["refresh_token"] = refresh
        return body

    # ------------------------------------------------------------- grants
    def client_credentials(self, app: Application, body: dict[str, object]) -> dict[str, object]:
        if app.grant_type != "client_credentials":
            raise OAuthError(
                400,
                "unauthorized_client",
                "public integrations use grant_type authorization_code, not client_credentials",
            )
        scopes = self.check_scopes(app, body.get("scope"))
        return self.grant_response(self.mint(app, None, scopes))

    def authorization_code(self, app: Application, body: dict[str, object]) -> dict[str, object]:
        if app.grant_type != "authorization_code":
            raise OAuthError(
                400, "unauthorized_client", f"{app.app_type} applications use client_credentials"
            )
        code_value = body.get("code")
        if not isinstance(code_value, str) or not code_value:
            raise OAuthError(400, "invalid_request", "code is required")
        code = self.codes.get(code_value)
        if code is None or code.used or code.client_id != app.client_id:
            raise OAuthError(400, "invalid_grant", "authorization code is unknown or already used")
        if self.clock.now() > code.issued_at + CODE_TTL_SECONDS:
            raise OAuthError(
                400,
                "invalid_grant",
                "authorization code expired (codes must be exchanged within 30 seconds); "
                "restart the authorization",
            )
        if body.get("redirect_uri") != code.redirect_uri:
            raise OAuthError(400, "invalid_grant", "redirect_uri does not match the authorization")
        source_id = body.get("source_id")
        if source_id is not None and source_id != code.source_id:
            raise OAuthError(400, "invalid_grant", "source_id does not match the authorization")
        code.used = True
        token = self.mint(app, code.source_id, code.scopes)
        return self.grant_response(token, self.new_refresh_token(app, code.source_id, code.scopes))

    def refresh(self, app: Application, body: dict[str, object]) -> dict[str, object]:
        if app.grant_type != "authorization_code":
            raise OAuthError(
                400, "unauthorized_client", "only public integrations have refresh tokens"
            )
        value = body.get("refresh_token")
        if not isinstance(value, str) or not value:
            raise OAuthError(400, "invalid_request", "refresh_token is required")
        record = self.refresh_tokens.get(value)
        if record is None or record.client_id != app.client_id or record.revoked:
            raise OAuthError(401, "invalid_grant", "refresh token is unknown or revoked")
        now = self.clock.now()
        if record.first_used_at is None:
            record.first_used_at = now
        elif now > record.first_used_at + REFRESH_REUSE_SECONDS:
            raise OAuthError(
                401,
                "invalid_grant",
                "refresh token expired: it was rotated more than 3 hours ago; re-authorize",
            )
        token = self.mint(app, record.source_id, record.scopes)
        return self.grant_response(
            token, self.new_refresh_token(app, record.source_id, record.scopes)
        )

    def suspend(self, app: Application, body: dict[str, object]) -> dict[str, object]:
        if app.grant_type != "authorization_code":
            raise OAuthError(
                400,
                "unauthorized_client",
                "suspend exists only for public integrations; rotate the client_secret instead",
            )
        value = body.get("token")
        if not isinstance(value, str) or not value:
            raise OAuthError(400, "invalid_request", "token is required")
        access = self.access.get(value)
        refresh = self.refresh_tokens.get(value)
        if access is not None and access.app.client_id == app.client_id:
            source_id = access.source_id
        elif refresh is not None and refresh.client_id == app.client_id:
            source_id = refresh.source_id
        else:
            raise OAuthError(401, "invalid_token", "token does not belong to this client_id")
        self._revoke_connection(app.client_id, source_id, "access was suspended")
        return {"success": True}

    def _revoke_connection(self, client_id: str, source_id: str | None, reason: str) -> None:
        for token in self.access.values():
            if (
                token.app.client_id == client_id
                and token.source_id == source_id
                and not token.revoked
            ):
                token.revoked = reason
        self.current.pop((client_id, source_id), None)
        for record in self.refresh_tokens.values():
            if record.client_id == client_id and record.source_id == source_id:
                record.revoked = True

    # ------------------------------------------------------------- control
    def revoke_current(self, client_id: str, source_id: str | None) -> bool:
        """As if another process minted: the current token stops working."""
        value = self.current.pop((client_id, source_id), None)
        if value is None:
            return False
        self.access[value].revoked = SUPERSEDED
        return True

    def secret_rotated(self, app: Application) -> int:
        """Revoke tokens minted with the old secret (client_credentials apps only)."""
        if app.grant_type != "client_credentials":
            return 0
        revoked = 0
        for token in self.access.values():
            if (
                token.app is app
                and not token.revoked
                and token.secret_generation < app.secret_generation
            ):
                token.revoked = "client secret was rotated"
                revoked += 1
        self.current = {k: v for k, v in self.current.items() if k[0] != app.client_id}
        return revoked

    def validate_authorization(
        self, client_id: str, redirect_uri: str, scope: object, source_id: str
    ) -> frozenset[str]:
        """Check an authorization request; OAuthError names what is wrong."""
        app = self.registry.get(client_id)
        if app is None or app.tier != self.tier:
            raise OAuthError(400, "invalid_client", f"unknown client_id {client_id!r}")
        if app.grant_type != "authorization_code":
            raise OAuthError(400, "unauthorized_client", f"{client_id} is not a public integration")
        if redirect_uri not in app.redirect_uris:
            raise OAuthError(
                400, "invalid_request", f"redirect_uri {redirect_uri!r} is not registered"
            )
        if not source_id:
            raise OAuthError(400, "invalid_request", "source_id is required")
        return self.check_scopes(app, scope)

    def create_code(
        self, client_id: str, redirect_uri: str, scope: object, source_id: str
    ) -> AuthorizationCode:
        """The customer consented: issue a single-use code valid for 30 seconds."""
        scopes = self.validate_authorization(client_id, redirect_uri, scope, source_id)
        code = AuthorizationCode(
            secrets.token_urlsafe(24), client_id, redirect_uri, scopes, source_id, self.clock.now()
        )
        self.codes[code.value] = code
        return code

    # ------------------------------------------------------------- data routes
    def authenticate_bearer(self, header: str | None) -> AccessToken:
        scheme, _, value = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(
                401, "unauthorized", "missing Authorization: Bearer <access token> header"
            )
        token = self.access.get(value.strip())
        if token is None:
            raise ApiError(401, "unauthorized", "access token is not valid")
        if token.revoked:
            raise ApiError(401, "unauthorized", token.revoked)
        if self.clock.now() >= token.expires_at:
            raise ApiError(401, "unauthorized", "access token expired")
        return token
