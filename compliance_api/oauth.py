"""The token endpoint's protocol, one method per grant. Retries, rate limits and storage belong
to the broker (``compliance_api.tokens``); request bodies (credentials) never reach an error or log.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
from pydantic import SecretStr

from compliance_api.errors import (
    AUTHORIZATION_CODE_LIFETIME_SECONDS,
    APIError,
    APIStatusError,
    AuthenticationError,
    CodeExchangeDeadlineError,
    ComplianceError,
    InputError,
    InvalidClientError,
    InvalidRequestError,
)
from compliance_api.http_errors import error_from_response, error_from_transport
from compliance_api.settings import ENV_PREFIX, ApplicationType, Settings

TOKEN_PATH = "/oauth/token"  # noqa: S105 - a path
SUSPEND_PATH = "/v1/oauth/token/suspend"  # noqa: S105 - a path
DEFAULT_EXPIRES_IN = 3599
#: sent this long before the code's 30 s are up: the request's own latency, and clock skew
CODE_EXCHANGE_SAFETY_SECONDS = 3.0
#: how far in the future a caller's ``received_at`` may be (clocks of one machine)
_RECEIVED_AT_TOLERANCE = timedelta(seconds=1)
#: request-body fields that are secrets: redacted should the token endpoint echo one
_SECRET_FIELDS = ("client_secret", "code", "refresh_token", "token")
#: what to do about the token endpoint's OAuth error codes, added to their messages
_HINTS = {
    "invalid_client": "The service rejected the application's credentials: update "
    f"{ENV_PREFIX}CLIENT_SECRET (after a secret rotation) or {ENV_PREFIX}CLIENT_ID, or the "
    f"client_secret or client_id of the block {ENV_PREFIX}CREDENTIALS_BLOCK names",
    "invalid_scope": f"Check {ENV_PREFIX}SCOPES against the application type",
}


class StateMismatchError(ComplianceError):
    """The ``state`` returned with the authorization code is not the one we sent (spec §5.5)."""


class ReauthorizationRequiredError(AuthenticationError):
    """The grant is gone (code or refresh token expired, revoked): the customer must re-consent."""


@dataclass(frozen=True)
class TokenGrant:
    """What the token endpoint handed out. Secrets stay ``SecretStr`` until sent as a header."""

    access_token: SecretStr = field(repr=False)
    expires_in: int
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


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _check_received_at(received_at: Any, now: datetime) -> datetime:
    """When the redirect arrived: an aware datetime, not in the future."""
    if not isinstance(received_at, datetime):
        raise InputError("received_at", received_at, "must be a datetime")
    if received_at.utcoffset() is None:
        raise InputError(
            "received_at",
            received_at,
            "must be timezone-aware (e.g. datetime.now(UTC)); a naive time is ambiguous here",
        )
    if received_at > now + _RECEIVED_AT_TOLERANCE:
        raise InputError("received_at", received_at, f"is in the future (now is {now:%X} UTC)")
    return received_at


@dataclass(frozen=True)
class CodeExchangeDeadline:
    """The moment an authorization code must be on its way: 30 s after its redirect arrived
    (spec §5.6) less a safety margin. Waits that would pass it are refused, not made."""

    received_at: datetime
    expires_at: datetime
    clock: Callable[[], datetime] = field(default=_utc_now, repr=False, compare=False)

    @classmethod
    def after_redirect(
        cls,
        received_at: datetime | None = None,
        *,
        clock: Callable[[], datetime] = _utc_now,
    ) -> CodeExchangeDeadline:
        """The deadline of a code whose redirect arrived at ``received_at`` (default: now)."""
        now = clock()
        arrived = now if received_at is None else _check_received_at(received_at, now)
        lifetime = timedelta(
            seconds=AUTHORIZATION_CODE_LIFETIME_SECONDS - CODE_EXCHANGE_SAFETY_SECONDS
        )
        return cls(received_at=arrived, expires_at=arrived + lifetime, clock=clock)

    def remaining(self) -> float:
        """Seconds left to send the code (negative once the deadline has passed)."""
        return (self.expires_at - self.clock()).total_seconds()

    def missed(self, waiting_for: str) -> CodeExchangeDeadlineError:
        """The error to raise because of ``waiting_for`` (what would have taken too long)."""
        return CodeExchangeDeadlineError(waiting_for, self.remaining())

    def check(self) -> None:
        """Raise if no time is left to send the code."""
        if self.remaining() <= 0:
            age = (self.clock() - self.received_at).total_seconds()
            raise self.missed(f"its redirect arrived {age:.1f} s ago")

    def refuse_wait(self, seconds: float, waiting_for: str) -> None:
        """Raise instead of waiting ``seconds`` if that would leave no time to send the code."""
        if seconds >= self.remaining():
            raise self.missed(waiting_for)


def verify_state(expected: str, received: str) -> None:
    """Abort on a mismatch (possible CSRF); the comparison takes constant time."""
    if not expected or not hmac.compare_digest(expected.encode(), received.encode()):
        raise StateMismatchError(
            "the state returned with the authorization code does not match the one sent with "
            "the authorization request; the exchange was aborted. Start the authorization again."
        )


class OAuthClient:
    """Token and suspend calls for one application. Without ``http`` each call opens its own
    ``httpx.AsyncClient``: a broker serves several event loops, which one pool cannot."""

    def __init__(self, settings: Settings, *, http: httpx.AsyncClient | None = None) -> None:
        self._settings = settings
        self._http = http

    async def client_credentials(self) -> TokenGrant:
        body = {"grant_type": "client_credentials", "scope": self._settings.scope_string}
        return await self._grant("mint token (client_credentials)", body)

    async def exchange_code(
        self,
        code: str,
        state: str,
        expected_state: str,
        *,
        deadline: CodeExchangeDeadline | None = None,
    ) -> TokenGrant:
        """Spec §5.5 step 3; ``state`` is checked first. A code past the ``deadline`` is not sent
        (``CodeExchangeDeadlineError``); the request's timeout is cut to the time left."""
        verify_state(expected_state, state)
        request_timeout = None
        if deadline is not None:
            deadline.check()
            request_timeout = min(self._settings.http_timeout_seconds, deadline.remaining())
        body = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self._settings.redirect_uri or "",
            "source_id": self._settings.source_id or "",
        }
        return await self._grant(
            "exchange authorization code", body, grant_lost=True, request_timeout=request_timeout
        )

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
        self,
        operation: str,
        body: dict[str, str],
        *,
        grant_lost: bool = False,
        request_timeout: float | None = None,
    ) -> TokenGrant:
        try:
            payload = await self._post(
                operation,
                TOKEN_PATH,
                {**body, **self._credentials()},
                request_timeout=request_timeout,
            )
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

    async def _post(
        self,
        operation: str,
        path: str,
        body: dict[str, str],
        *,
        request_timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST JSON; errors are mapped as the data client's, the body's secrets redacted."""
        url = f"{self._settings.api_base_url}{path}"
        timeout = httpx.USE_CLIENT_DEFAULT if request_timeout is None else request_timeout
        failure: APIError
        try:
            async with (
                nullcontext(self._http)
                if self._http is not None
                else httpx.AsyncClient(timeout=self._settings.http_timeout_seconds)
            ) as http:
                response = await http.post(url, json=body, timeout=timeout)
        except httpx.TransportError as exc:
            failure = error_from_transport(exc, operation)
        else:
            if response.is_success:
                return _json_object(response)
            secrets = [body[name] for name in _SECRET_FIELDS if body.get(name)]
            failure = error_from_response(response, operation, secrets=secrets, hints=_HINTS)
            del response  # its request holds the body's secrets; keep it off the traceback
        # raised outside ``except`` so the httpx error (and the request body) is not chained
        raise failure


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
    expires_in = payload.get("expires_in")
    if not isinstance(expires_in, int | float | str):
        expires_in = DEFAULT_EXPIRES_IN
    return TokenGrant(
        access_token=SecretStr(access),
        expires_in=int(expires_in),
        refresh_token=SecretStr(refresh) if isinstance(refresh, str) and refresh else None,
    )
