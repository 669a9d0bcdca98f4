"""The data client's retries (tenacity): a call's only ones, in a flow run too
(``runtime/retries.py``), so it is sent at most ``max_attempts`` times. Only a repeat that
cannot double-apply a write is made (docs/client.md, Retries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from compliance_api.errors import (
    APIError,
    InputError,
    RateLimitedError,
    ServerError,
    TransportError,
)


class RetryMode(Enum):
    """How safe it is to send an operation twice."""

    #: repeating the request cannot change the outcome (reads, PATCH, set-like writes)
    IDEMPOTENT = "idempotent"
    #: a repeat could duplicate: retry only a 429 or a request that never left this machine
    UNAPPLIED_ONLY = "unapplied_only"


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first try; waits grow from ``initial_wait`` to ``max_wait``
    with full jitter, or follow a 429's ``Retry-After`` capped at ``max_retry_after``."""

    max_attempts: int = 6
    initial_wait: float = 0.5
    max_wait: float = 30.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InputError("max_attempts", self.max_attempts, "must be at least 1")
        for name in ("initial_wait", "max_wait", "max_retry_after"):
            if getattr(self, name) < 0:
                raise InputError(name, getattr(self, name), "must not be negative")

    @classmethod
    def from_max_retries(cls, max_retries: int) -> RetryPolicy:
        """``COMPLIANCE_MAX_RETRIES`` counts retries, not attempts."""
        return cls(max_attempts=max(0, max_retries) + 1)


@dataclass(frozen=True)
class RetryNotice:
    """What a caller learns before each retry: enough to log or count, never a secret."""

    operation: str
    attempt: int
    wait_seconds: float
    error: APIError


def is_retryable(error: BaseException, mode: RetryMode, operation: str) -> bool:
    """Transient failures of *this* operation (not a token provider's); ``UNAPPLIED_ONLY`` skips
    a 5xx or a lost answer, which may hide an applied create."""
    if not isinstance(error, APIError) or error.operation != operation:
        return False
    if isinstance(error, RateLimitedError):
        return True
    if isinstance(error, TransportError):
        return mode is RetryMode.IDEMPOTENT or not error.request_sent
    if mode is RetryMode.UNAPPLIED_ONLY:
        return False
    return isinstance(error, ServerError)


def retrying(
    policy: RetryPolicy,
    mode: RetryMode,
    operation: str,
    on_retry: Callable[[RetryNotice], None] | None = None,
) -> AsyncRetrying:
    """The tenacity controller for one call; the original error is re-raised when it gives up."""
    backoff = wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait)

    def wait(state: RetryCallState) -> float:
        """The server's ``Retry-After`` when it sent one, else exponential backoff with jitter."""
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, RateLimitedError) and error.retry_after is not None:
            return max(0.0, min(error.retry_after, policy.max_retry_after))
        return float(backoff(state))

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is None or state.outcome is None:
            return
        error = state.outcome.exception()
        if isinstance(error, APIError):
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            on_retry(RetryNotice(operation, state.attempt_number, float(wait), error))

    return AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts),
        wait=wait,
        retry=retry_if_exception(lambda error: is_retryable(error, mode, operation)),
        before_sleep=before_sleep,
        reraise=True,
    )
