"""The token endpoint: one method per grant, errors mapped to ``compliance_api.errors``.

This module only speaks the protocol. It neither retries nor rate-limits nor stores: the token
broker (``compliance_api.tokens``) owns those, because they must be shared by every caller.
Request bodies carry credentials, so they are never copied into an error or a log line.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
from pydantic import SecretStr

from compliance_api.errors import (
    APIStatusError,
    AuthenticationError,
    ComplianceError,
    InvalidClientError,
    InvalidRequestError,
    InvalidScopeError,
    RateLimitedError,
    ServerError,
    TransportError,
)
from compliance_api.settings import ENV_PREFIX, ApplicationType, Settings

TOKEN_PATH = "/oauth/token"  # noqa: S105 - a path
SUSPEND_PATH = "/v1/oauth/token/suspend"  # noqa: S105 - a path
DEFAULT_EXPIRES_IN = 3599


class StateMismatchError(ComplianceError):
    """The ``state`` returned with the authorization code is not the one we sent (spec §5.5)."""


class ReauthorizationRequiredError(AuthenticationError):
    """The grant is gone (code or refresh token expired, revoked): the customer must re-consent."""


@dataclass(frozen=True)
class TokenGrant:
    """What the token endpoint handed out. Secrets stay ``SecretStr`` until sent as a header."""

    access_token: SecretStr = field(repr=False)
    expires_in: int
    token_type: str = "Bearer"  # noqa: S105 - a token type, not a secret
    refresh_token: SecretStr | None = field(default=None, repr=False)


@dataclass(frozen=True)
class AuthorizationRequest:
    """Where to send the customer's browser, and the state to compare on the way back."""

    url: str
    state: str = field(repr=False)


def build_authorization_request(
    settings: Settings, *, state: str | None = None
) -> AuthorizationRequest:
    """The consent URL of spec §5.5 step 1, with an unguessable ``state`` unless one is given."""
    if settings.application_type is not ApplicationType.INTEGRATION_PUBLIC:
        raise ComplianceError(
            f"{ENV_PREFIX}APPLICATION_TYPE={settings.application_type.value} does not use the "
            "authorization-code flow; only integration_public applications do"
        )
    if not settings.redirect_uri:
        raise ComplianceError(f"{ENV_PREFIX}REDIRECT_URI is required for the authorization URL")
    chosen = state or secrets.token_urlsafe(32)
    query = {
        "client_id": settings.client_id,
        "scope": settings.scope_string,
        "state": chosen,
        "redirect_uri": settings.redirect_uri,
        "source_id": settings.source_id or "",
        "response_type": "code",
    }
    return AuthorizationRequest(url=f"{settings.authorize_url}?{urlencode(query)}", state=chosen)


def verify_state(expected: str, received: str) -> None:
    """Abort on a mismatch (possible CSRF); the comparison takes constant time."""
    if not expected or not hmac.compare_digest(expected.encode(), received.encode()):
        raise StateMismatchError(
            "the state returned with the authorization code does not match the one sent with "
            "the authorization request; the exchange was aborted. Start the authorization again."
        )


class OAuthClient:
    """Calls ``POST {base}/oauth/token`` and the suspend operation for one application.

    Without ``http`` a short-lived ``httpx.AsyncClient`` is opened per call: token calls are a
    handful per hour and a shared broker is used from several event loops, which one pooled
    client could not serve.
    """

    def __init__(self, settings: Settings, *, http: httpx.AsyncClient | None = None) -> None:
        self._settings = settings
        self._http = http

    @property
    def base_url(self) -> str:
        return self._settings.api_base_url

    async def client_credentials(self) -> TokenGrant:
        body = {"grant_type": "client_credentials", "scope": self._settings.scope_string}
        return await self._grant("mint token (client_credentials)", body)

    async def exchange_code(self, code: str, state: str, expected_state: str) -> TokenGrant:
        """Spec §5.5 step 3; ``state`` is checked first: a forged redirect never reaches the API."""
        verify_state(expected_state, state)
        body = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self._settings.redirect_uri or "",
            "source_id": self._settings.source_id or "",
        }
        return await self._grant("exchange authorization code", body, grant_lost=True)

    async def refresh(self, refresh_token: SecretStr) -> TokenGrant:
        body = {"grant_type": "refresh_token", "refresh_token": refresh_token.get_secret_value()}
        return await self._grant("refresh token", body, grant_lost=True)

    async def suspend(self, token: SecretStr) -> None:
        """Revoke a customer's access (public integrations, spec §4.13)."""
        body = {"token": token.get_secret_value(), **self._credentials()}
        await self._post("suspend token", SUSPEND_PATH, body)

    def _credentials(self) -> dict[str, str]:
        return {
            "client_id": self._settings.client_id,
            "client_secret": self._settings.client_secret.get_secret_value(),
        }

    async def _grant(
        self, operation: str, body: dict[str, str], *, grant_lost: bool = False
    ) -> TokenGrant:
        try:
            payload = await self._post(operation, TOKEN_PATH, {**body, **self._credentials()})
        except AuthenticationError as exc:
            if grant_lost and not isinstance(exc, InvalidClientError):
                raise ReauthorizationRequiredError(
                    f"{exc.message}; the customer must authorize the application again",
                    operation=operation,
                    status_code=exc.status_code,
                    code=exc.code,
                ) from None
            raise
        except InvalidRequestError as exc:
            if grant_lost and exc.code == "invalid_grant":
                raise ReauthorizationRequiredError(
                    f"{exc.message}; an authorization code must be exchanged within 30 seconds "
                    "and a refresh token within 3 hours of its first use. Authorize again.",
                    operation=operation,
                    status_code=exc.status_code,
                    code=exc.code,
                ) from None
            raise
        return _parse_grant(operation, payload)

    async def _post(self, operation: str, path: str, body: dict[str, str]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        try:
            if self._http is not None:
                response = await self._http.post(url, json=body)
            else:
                timeout = self._settings.http_timeout_seconds
                async with httpx.AsyncClient(timeout=timeout) as http:
                    response = await http.post(url, json=body)
        except httpx.TransportError as exc:
            sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            raise TransportError(
                f"{type(exc).__name__} calling {url}", operation=operation, request_sent=sent
            ) from None
        if response.is_success:
            return _json_object(response)
        raise _error_for(operation, response)


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        payload = response.json()
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


def _parse_grant(operation: str, payload: dict[str, Any]) -> TokenGrant:
    access = payload.get("access_token")
    if not isinstance(access, str) or not access:
        raise APIStatusError("the response has no access_token", operation=operation)
    refresh = payload.get("refresh_token")
    expires_in = payload.get("expires_in", DEFAULT_EXPIRES_IN)
    return TokenGrant(
        access_token=SecretStr(access),
        expires_in=int(expires_in) if isinstance(expires_in, int | float | str) else 3599,
        token_type=str(payload.get("token_type") or "Bearer"),
        refresh_token=SecretStr(refresh) if isinstance(refresh, str) and refresh else None,
    )


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("Retry-After")
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


def _error_for(operation: str, response: httpx.Response) -> APIStatusError:
    """OAuth 2.0 error bodies, read tolerantly (``message``, ``error_description``, ``error``)."""
    payload = _json_object(response)
    code = payload.get("error") if isinstance(payload.get("error"), str) else None
    message = str(
        payload.get("message") or payload.get("error_description") or code or response.reason_phrase
    )
    status = response.status_code
    common: dict[str, Any] = {"operation": operation, "status_code": status, "code": code}
    if status == 429:
        return RateLimitedError(message, retry_after=_retry_after(response), **common)
    if status >= 500:
        return ServerError(message, **common)
    if code == "invalid_client":
        return InvalidClientError(
            f"{message}. The service rejected the application's credentials: update "
            f"{ENV_PREFIX}CLIENT_SECRET (after a secret rotation) or {ENV_PREFIX}CLIENT_ID",
            **common,
        )
    if code == "invalid_scope":
        return InvalidScopeError(
            f"{message}. Check {ENV_PREFIX}SCOPES against the application type", **common
        )
    if status == 401:
        return AuthenticationError(message, **common)
    if status in (400, 422):
        return InvalidRequestError(message, **common)
    return APIStatusError(message, **common)
