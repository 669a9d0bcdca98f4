"""How this project runs the Prefect servers it starts (make serve, make demo, make bench).

Operators who run their own ``prefect server start`` should set the same variables
(docs/scaling.md).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: The task-run recorder (the server service that turns task-run state events into the rows the
#: UI shows) writes each event in its own transaction by default, which under a bulk run holds
#: SQLite's write lock against every other write (they get 503s and wait out client retries).
#: In batches of up to 200, flushed every second, the server keeps up with the run, and the UI
#: is at most a second behind (docs/performance.md).
TASK_RUN_RECORDER_BATCHING = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
}


#: Concurrency-slot leases (the project's locks, deployment concurrency limits) are kept in
#: memory by default: a restarted server forgets them while their slots stay taken, so a lock
#: would stay held for ever. On disk (in the server's PREFECT_HOME) they survive a restart and
#: the repossessor frees the expired ones. Several server replicas share Redis instead
#: (``redis_settings``, docs/scaling.md).
LEASE_STORAGE = {
    "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": (
        "prefect.server.concurrency.lease_storage.filesystem"
    ),
}

#: A waiter for a taken slot asks again after about the limit's average hold time, capped at
#: this many seconds (Prefect's default cap is 30): the token lock is held for a fraction of a
#: second, and a waiter should not sleep through many such holds.
SLOT_WAIT = {"PREFECT_SERVER_CONCURRENCY_MAXIMUM_CONCURRENCY_SLOT_WAIT_SECONDS": "1"}

SERVER_SETTINGS = TASK_RUN_RECORDER_BATCHING | LEASE_STORAGE | SLOT_WAIT


def apply_server_settings(env: MutableMapping[str, str] | None = None) -> None:
    """Add the project's server settings to ``env`` (default: this process's environment, read
    by a server it starts), leaving any value the operator set alone."""
    target = os.environ if env is None else env
    for name, value in SERVER_SETTINGS.items():
        target.setdefault(name, value)


def redis_settings(url: str) -> dict[str, str]:
    """Prefect on Redis (prefect-redis), as Prefect's guide to scaling a self-hosted server has
    it: events wait in Redis streams for the services process (a restart of it loses none),
    event ordering and concurrency leases are shared by every replica, and the background
    services' docket coordinates through the same Redis."""
    return {
        "PREFECT_MESSAGING_BROKER": "prefect_redis.messaging",
        "PREFECT_MESSAGING_CACHE": "prefect_redis.messaging",
        "PREFECT_SERVER_EVENTS_CAUSAL_ORDERING": "prefect_redis.ordering",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect_redis.lease_storage",
        "PREFECT_REDIS_MESSAGING_URL": url,
        "PREFECT_SERVER_DOCKET_URL": url,
    }
