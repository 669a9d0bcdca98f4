"""How this project runs the Prefect servers it starts (make serve, make demo, make bench);
operators running their own should set the same (docs/settings.md, docs/scaling.md).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: One transaction per task-run state (the default) holds SQLite's write lock through a bulk
#: run; in batches the server keeps up, the UI at most a second behind (docs/performance.md).
TASK_RUN_RECORDER_BATCHING = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
}

#: Concurrency-slot leases on disk, not in memory: a restarted server would forget them while
#: their slots (the project's locks) stay taken for ever. Replicas share Redis instead.
LEASE_STORAGE = {
    "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": (
        "prefect.server.concurrency.lease_storage.filesystem"
    ),
}

#: A waiter asks again after at most 1 s (Prefect's cap: 30): the token lock is held for a
#: fraction of a second, and a waiter should not sleep through many such holds.
SLOT_WAIT = {"PREFECT_SERVER_CONCURRENCY_MAXIMUM_CONCURRENCY_SLOT_WAIT_SECONDS": "1"}

#: A write waits up to 30 s for SQLite's lock (Prefect's default: 10 s, then the request fails
#: with 500 or 503): on a busy machine a writer can hold it longer, and busy must cost time, not
#: a failed state change. Below the client's 60 s request timeout. On PostgreSQL it bounds a
#: statement instead.
DATABASE_WAIT = {"PREFECT_SERVER_DATABASE_TIMEOUT": "30"}

SERVER_SETTINGS = TASK_RUN_RECORDER_BATCHING | LEASE_STORAGE | SLOT_WAIT | DATABASE_WAIT


def apply_server_settings(env: MutableMapping[str, str] | None = None) -> None:
    """Add the server settings to ``env`` (default: ``os.environ``), keeping values already set."""
    target = os.environ if env is None else env
    for name, value in SERVER_SETTINGS.items():
        target.setdefault(name, value)


def redis_settings(url: str) -> dict[str, str]:
    """Prefect's messaging, event ordering, leases and docket on Redis, shared by every replica
    (Prefect's scaling guide; docs/scaling.md §4)."""
    return {
        "PREFECT_MESSAGING_BROKER": "prefect_redis.messaging",
        "PREFECT_MESSAGING_CACHE": "prefect_redis.messaging",
        "PREFECT_SERVER_EVENTS_CAUSAL_ORDERING": "prefect_redis.ordering",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect_redis.lease_storage",
        "PREFECT_REDIS_MESSAGING_URL": url,
        "PREFECT_SERVER_DOCKET_URL": url,
    }
