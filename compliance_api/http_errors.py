"""HTTP failures to the package's exceptions, for the data client and the token endpoint alike.
No httpx object (its request carries the bearer header or client secret) is kept on an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from compliance_api.errors import (
    APIStatusError,
    AuthenticationError,
    ConflictError,
    InvalidClientError,
    InvalidRequestError,
    InvalidScopeError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    TransportError,
)

MAX_MESSAGE_LENGTH = 500
REDACTED = "[redacted]"

#: failures raised before any byte of the request was written: safe to resend anything
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def read_server_message(response: httpx.Response) -> tuple[str, str | None]:
    """``(message, code)`` from any body: ``message``, ``error_description`` (OAuth) or ``error``
    (error bodies are unpublished and differ by route); never raises."""
    code: str | None = None
    try:
        body = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        raw_code = body.get("error")
        if isinstance(raw_code, str) and raw_code:
            code = raw_code
        for key in ("message", "error_description", "error"):
            value = body.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip(), code
    # a short non-JSON, non-HTML body is still the best explanation there is
    try:
        text = response.text.strip()
    except (UnicodeDecodeError, LookupError):
        text = ""
    if text and not text.startswith(("{", "[", "<")):
        return text, code
    return response.reason_phrase or f"HTTP {response.status_code}", code


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from ``Retry-After`` (delta-seconds or an HTTP date); None if unusable."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())


def redact(text: str, secrets: Iterable[str]) -> str:
    """A misbehaving server could echo a token back: never let it reach an exception."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def error_from_response(
    response: httpx.Response,
    operation: str,
    *,
    secrets: Iterable[str] = (),
    hints: Mapping[str, str] | None = None,
) -> APIStatusError:
    """The exception for an error status; ``secrets`` are redacted from what the server says,
    ``hints`` (by error code) are added to the capped message."""
    secrets = tuple(secrets)
    message, code = read_server_message(response)
    message = redact(message, secrets)[:MAX_MESSAGE_LENGTH]
    status = response.status_code
    if code is not None:
        code = redact(code, secrets)[:100]
    hint = (hints or {}).get(code or "")
    if hint:
        message = f"{message}. {hint}"
    if status == 429:
        return RateLimitedError(
            message,
            operation=operation,
            status_code=status,
            code=code,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )
    return _class_for(status, code)(message, operation=operation, status_code=status, code=code)


#: OAuth 2.0 codes (RFC 6749 §5.2) decide over the 4xx status that carries them
_BY_CODE = {"invalid_client": InvalidClientError, "invalid_scope": InvalidScopeError}
_BY_STATUS = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: InvalidRequestError,
}


def _class_for(status: int, code: str | None) -> type[APIStatusError]:
    if status >= 500:
        return ServerError
    return _BY_CODE.get(code or "") or _BY_STATUS.get(status, APIStatusError)


def error_from_transport(exc: httpx.TransportError, operation: str) -> TransportError:
    """No response: say whether the request provably never left (then resending is safe)."""
    request_sent = not isinstance(exc, _NOT_SENT)
    detail = str(exc).strip() or "no detail"
    return TransportError(
        f"{type(exc).__name__}: {detail}", operation=operation, request_sent=request_sent
    )
