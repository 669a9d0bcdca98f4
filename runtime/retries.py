"""Which task failures Prefect retries, and how long it waits: declared once, used by every task.

The data client already retries quick blips inside one task run; these task-level retries ride
out longer trouble (a deploy of the service, a rate-limit window) and show up in the UI as
"Retrying" task runs. Only transient errors are retried: a 404 or 403 will not change by asking
again, and a write that may have been applied must never be sent blindly a second time.
"""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import NONE
from prefect.tasks import exponential_backoff

from compliance_api.errors import RateLimitedError, ServerError, TransportError

#: retries after the first attempt, for every write task
WRITE_RETRIES = 3
#: waits of 5, 10, 20 seconds (before jitter)
WRITE_RETRY_DELAYS = exponential_backoff(backoff_factor=5)(WRITE_RETRIES)
#: each wait is spread by up to +/-50% so parallel items do not retry in lockstep
RETRY_JITTER = 0.5

#: reads are cheap and idempotent: retry a little more eagerly
READ_RETRIES = 3
READ_RETRY_DELAYS = exponential_backoff(backoff_factor=2)(READ_RETRIES)


def _error_of(state: Any) -> BaseException | None:
    """The exception a failed task run raised (Prefect keeps it as the state's data)."""
    data = getattr(state, "data", None)
    return data if isinstance(data, BaseException) else None


def is_transient(error: BaseException | None) -> bool:
    """Errors that a later attempt can cure: 5xx, 429 and lost connections."""
    return isinstance(error, ServerError | RateLimitedError | TransportError)


def is_provably_unapplied(error: BaseException | None) -> bool:
    """Errors after which a create provably did not happen, so it is safe to send again.

    A 429 is a refusal before any work; a transport error counts only when the request never
    left this machine. A 5xx or a lost response may hide a link that was created.
    """
    if isinstance(error, RateLimitedError):
        return True
    return isinstance(error, TransportError) and not error.request_sent


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn`` of idempotent operations (PATCH, add-to-managed, add-people)."""
    return is_transient(_error_of(state))


def retry_if_unapplied(task: Any, task_run: Any, state: Any) -> bool:
    """``retry_condition_fn`` of creates (document links): never risk a duplicate."""
    return is_provably_unapplied(_error_of(state))


#: ``@task(**IDEMPOTENT_WRITE)``: writes that are safe to repeat (PATCH, add-to-managed, add-people)
IDEMPOTENT_WRITE: dict[str, Any] = {
    "retries": WRITE_RETRIES,
    "retry_delay_seconds": WRITE_RETRY_DELAYS,
    "retry_jitter_factor": RETRY_JITTER,
    "retry_condition_fn": retry_transient,
    # nothing cached or stored: a write must run each time, and its result stays in memory
    "cache_policy": NONE,
    "persist_result": False,
}
#: ``@task(**CREATE_ONCE)``: creates, retried only when the request provably never arrived
CREATE_ONCE: dict[str, Any] = {**IDEMPOTENT_WRITE, "retry_condition_fn": retry_if_unapplied}
#: ``@task(**READ)``: cheap idempotent reads
READ: dict[str, Any] = {
    **IDEMPOTENT_WRITE,
    "retries": READ_RETRIES,
    "retry_delay_seconds": READ_RETRY_DELAYS,
}
