"""The exception hierarchy every layer catches (docs/client.md, Errors). Errors carry the
operation and the server's message, never a secret; ``oauth.py`` and ``tokens/errors.py`` add
the token-side ones.
"""

from __future__ import annotations

from typing import Any

#: how long an authorization code can be exchanged after its redirect (spec §5.6, §8)
AUTHORIZATION_CODE_LIFETIME_SECONDS = 30.0


class ComplianceError(Exception):
    """Root of everything this package raises on purpose."""


class ConfigurationError(ComplianceError):
    """A setting is missing or malformed; the message names the environment variable."""


class InputError(ComplianceError, ValueError):
    """Client-side validation failed before any request was made."""

    def __init__(self, field: str, value: Any, problem: str, *, item: str | None = None) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.item = item
        where = f"{item}: " if item else ""
        super().__init__(f"{where}{field}={value!r}: {problem}")


class CodeExchangeDeadlineError(ComplianceError):
    """An authorization code cannot be sent within 30 s of its redirect (spec §5.6): raised
    instead of a wait past it, since the only remedy is a new authorization by the customer."""

    def __init__(self, waiting_for: str, remaining_seconds: float) -> None:
        left = max(0.0, remaining_seconds)
        super().__init__(
            f"the authorization code was not exchanged: {waiting_for}, and {left:.1f} s are "
            f"left of the {AUTHORIZATION_CODE_LIFETIME_SECONDS:.0f} s a code lives after the "
            "redirect (less a safety margin). Ask the customer to authorize the application "
            "again (compliance-flows authorize-url), then exchange the new code at once."
        )


class APIError(ComplianceError):
    """A call to the service did not succeed."""

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        status_code: int | None = None,
        code: str | None = None,
    ) -> None:
        self.message = message
        self.operation = operation
        self.status_code = status_code
        self.code = code
        detail = " ".join(part for part in (str(status_code or ""), code or "") if part)
        prefix = f"{operation} failed ({detail})" if detail else f"{operation} failed"
        super().__init__(f"{prefix}: {message}")


class TransportError(APIError):
    """No response arrived. ``request_sent`` is False only when the request provably never left."""

    def __init__(self, message: str, *, operation: str, request_sent: bool) -> None:
        self.request_sent = request_sent
        super().__init__(message, operation=operation)


class APIStatusError(APIError):
    """The service answered with an error status."""


class InvalidRequestError(APIStatusError):
    """400 / 422: the service rejected the request's content."""


class InvalidScopeError(InvalidRequestError):
    """400 invalid_scope: a scope not allowed for the application type."""


class AuthenticationError(APIStatusError):
    """401: the token is expired, superseded or not the caller's."""


class InvalidClientError(AuthenticationError):
    """401 invalid_client: wrong id or secret, typically after a secret rotation."""


class PermissionDeniedError(APIStatusError):
    """403: authenticated, but not allowed (missing scope or entitlement)."""


class NotFoundError(APIStatusError):
    """404: the identified resource does not exist."""


class ConflictError(APIStatusError):
    """409: the request conflicts with the resource's current state."""


class RateLimitedError(APIStatusError):
    """429: too many requests; ``retry_after`` is in seconds when the server said."""

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        status_code: int | None = 429,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(message, operation=operation, status_code=status_code, code=code)


class ServerError(APIStatusError):
    """5xx: a transient failure on the service's side."""
