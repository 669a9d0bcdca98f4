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


def apply_server_settings(env: MutableMapping[str, str] | None = None) -> None:
    """Add the project's server settings to ``env`` (default: this process's environment, read
    by a server it starts), leaving any value the operator set alone."""
    target = os.environ if env is None else env
    for name, value in TASK_RUN_RECORDER_BATCHING.items():
        target.setdefault(name, value)
