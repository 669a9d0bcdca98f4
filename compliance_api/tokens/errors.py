"""Errors of the token broker and its backends; none of them ever carries a token."""

from __future__ import annotations

from compliance_api.errors import ComplianceError


class TokenLockTimeoutError(ComplianceError):
    """The token lock was not obtained in time (the message names its holder); ``retry_after``:
    seconds before the backend wants to be asked again, if it said."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TokenRateLimitWaitError(ComplianceError):
    """No rate-limit slot within the caller's ``max_wait``: raised without taking a slot (at once
    when the limiter knows the wait), so a code exchange fails fast instead of waiting."""

    def __init__(self, wait_seconds: float | None, max_wait: float) -> None:
        self.wait_seconds = wait_seconds
        self.max_wait = max_wait
        within = f"{max(0.0, max_wait):.1f} s"
        if wait_seconds is None:
            message = f"the token endpoint's rate limit had no free slot within {within}"
        else:
            message = (
                f"the token endpoint's rate limit has no free slot for {wait_seconds:.0f} s, "
                f"more than the {within} the caller can wait"
            )
        super().__init__(message)


class TokenStoreError(ComplianceError):
    """The token store could not be read, decrypted or written."""


class NotConnectedError(ComplianceError):
    """A public integration has no stored grant for this customer: the customer must authorize."""
