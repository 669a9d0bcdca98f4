"""When and how long the data client waits before trying a call again (declared, via tenacity).

These are the only retries of a data call, also inside a flow run (``runtime/retries.py``
says why): one call is sent at most ``max_attempts`` times (``COMPLIANCE_MAX_RETRIES`` + 1),
whoever calls it. Only failures that cannot double-apply a write are retried: a read, a PATCH,
approve, add-to-managed and add-people (set semantics) may be repeated after any transient
failure; creating a document link only when it provably was not applied (a 429, or a request
that never left this machine).
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
    #: a repeat could create a duplicate: retry only if the first request provably was not
    #: applied (a 429 is a refusal before any work; a request that never left this machine)
    UNAPPLIED_ONLY = "unapplied_only"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the backoff; tests pass tiny waits so retry paths run in milliseconds.

    ``max_attempts`` counts the first try. Waits grow exponentially from ``initial_wait`` up
    to ``max_wait`` with full jitter (so parallel workers do not retry in lockstep). A 429's
    ``Retry-After`` is honoured instead, capped at ``max_retry_after``.
    """

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
    """Transient failures of *this* operation (a token-provider error is not ours to retry).

    A 5xx or a lost answer may hide a create that was applied, so ``UNAPPLIED_ONLY`` leaves
    those to the caller; a 429 and a request that never left are safe to send again.
    """
    if not isinstance(error, APIError) or error.operation != operation:
        return False
    if isinstance(error, RateLimitedError):
        return True
    if isinstance(error, TransportError):
        return mode is RetryMode.IDEMPOTENT or not error.request_sent
    if mode is RetryMode.UNAPPLIED_ONLY:
        return False
    return isinstance(error, ServerError)


class _Wait:
    """Exponential backoff with jitter, or the server's ``Retry-After`` when it sent one."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._backoff = wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait)

    def __call__(self, state: RetryCallState) -> float:
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        if isinstance(error, RateLimitedError) and error.retry_after is not None:
            return max(0.0, min(error.retry_after, self._policy.max_retry_after))
        return float(self._backoff(state))


def retrying(
    policy: RetryPolicy,
    mode: RetryMode,
    operation: str,
    on_retry: Callable[[RetryNotice], None] | None = None,
) -> AsyncRetrying:
    """The tenacity controller for one call; the original error is re-raised when it gives up."""

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is None or state.outcome is None:
            return
        error = state.outcome.exception()
        if isinstance(error, APIError):
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            on_retry(RetryNotice(operation, state.attempt_number, float(wait), error))

    return AsyncRetrying(
        stop=stop_after_attempt(policy.max_attempts),
        wait=_Wait(policy),
        retry=retry_if_exception(lambda error: is_retryable(error, mode, operation)),
        before_sleep=before_sleep,
        reraise=True,
    )
