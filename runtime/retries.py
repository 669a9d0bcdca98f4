"""The data client's retries are the only retries of a Compliance API call inside a flow run.

They know a 429's Retry-After and which writes are safe to resend; task retries on top would
multiply the sends (docs/write-flows.md). What outlasts them ends ``failed_retryable`` for the
automatic rerun. Each client retry is logged on the run as a warning. ``again_when_busy`` is
for the project's own writes to the Prefect API (records, reports), not Compliance API calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prefect.cache_policies import NONE
from prefect.exceptions import MissingContextError, PrefectHTTPStatusError
from prefect.logging import get_run_logger
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from compliance_api.retry import RetryNotice

#: ``@task(**API_CALL)`` for a task making API calls; ``retries=0`` is explicit, so a
#: ``PREFECT_TASK_DEFAULT_RETRIES`` cannot add a second layer.
API_CALL: dict[str, Any] = {
    "retries": 0,
    # nothing cached or stored: a write must run each time, and its result stays in memory
    "cache_policy": NONE,
    "persist_result": False,
}

_fallback_logger = logging.getLogger("compliance_flows.retries")


def log_client_retry(max_attempts: int) -> Callable[[RetryNotice], None]:
    """The client's ``on_retry``: a warning on the calling run's log (outside a run, this
    module's logger). The error never carries a secret."""

    def log(notice: RetryNotice) -> None:
        try:
            logger: logging.Logger | logging.LoggerAdapter[Any] = get_run_logger()
        except MissingContextError:
            logger = _fallback_logger
        logger.warning(
            "Retrying %s in %.1f s (attempt %d of %d failed: %s)",
            notice.operation,
            notice.wait_seconds,
            notice.attempt,
            max_attempts,
            notice.error,
        )

    return log


def _server_busy(error: BaseException) -> bool:
    return isinstance(error, PrefectHTTPStatusError) and error.response.status_code >= 500


#: for writes to the Prefect API whose loss would lose an item or a report: a busy server
#: answers 5xx now and then (a locked SQLite database), which Prefect's client does not retry
again_when_busy = retry(
    retry=retry_if_exception(_server_busy),
    stop=stop_after_attempt(5),
    wait=wait_exponential(multiplier=1, max=15),
    reraise=True,
)
