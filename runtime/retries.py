"""Who retries a Compliance API call inside a flow run: the data client, and nothing on top.

One layer, with a bounded total. The client's own retries (``compliance_api/retry.py``) send
one call at most ``COMPLIANCE_MAX_RETRIES`` + 1 times (6 by default). They are the layer because
they know what a Prefect task retry cannot: a 429's ``Retry-After``, backoff with jitter, and
which writes are safe to send again (a document link only when provably unapplied: a 429, or a
request that never left); they also work the same from plain Python. So the tasks that wrap an
API call declare ``retries=0``: task retries on top would multiply the sends (4 task attempts of
6 sends each were 24 sends of one chunk under a persistent 503). Trouble that outlasts those
attempts is not ridden out inside the run: its items end ``failed_retryable``, and the automatic
rerun of failed items sends them again later, as a new run. Each client retry is logged on the
task run (a warning), so it still shows in the UI.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from prefect.cache_policies import NONE
from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger

from compliance_api.retry import RetryNotice

#: ``@task(**API_CALL)``: a task that makes Compliance API calls through the shared client.
#: ``retries=0`` is explicit, so a ``PREFECT_TASK_DEFAULT_RETRIES`` cannot add a second layer.
API_CALL: dict[str, Any] = {
    "retries": 0,
    # nothing cached or stored: a write must run each time, and its result stays in memory
    "cache_policy": NONE,
    "persist_result": False,
}

_fallback_logger = logging.getLogger("compliance_flows.retries")


def log_client_retry(max_attempts: int) -> Callable[[RetryNotice], None]:
    """The client's ``on_retry``: a warning in the log of the task (or flow) run making the
    call, or in this module's logger outside a run. The error never carries a secret."""

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
