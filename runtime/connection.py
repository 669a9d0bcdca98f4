"""How every task gets a client: ``async with compliance_client() as client:``.

The client is wired to the process's token broker for the run's customer key
(``shared_broker``), so all tasks, flow runs and threads of a process share one token in memory
and one renewal at a time, and all processes share one stored token
(``compliance_api/tokens/broker.py``, docs/shared-token.md).

Backend rule:
- rate limiter: the Prefect global concurrency limit when a Prefect API is configured
  (``PREFECT_API_URL``, as on every worker and under ``prefect_test_harness``), otherwise a
  file-based limiter shared by the processes of this machine;
- store + lock: ``COMPLIANCE_TOKEN_STORE=local`` (default; encrypted files under
  ``COMPLIANCE_STATE_DIR`` and a ``flock`` lock) or ``prefect`` (encrypted Prefect Variables and
  a lock on the Prefect server, ``runtime/locks.py``; for workers on several machines).

Settings come from ``runtime.credentials.load_run_settings()``: the credentials block that
``COMPLIANCE_CREDENTIALS_BLOCK`` names (read once per process) over the environment, or the
environment alone.

Every write the client sends, retries included, first passes ``runtime.attempts.guard_write``:
a process whose flow run was started again elsewhere stops writing.

The client's own retries are the only retries of a call inside a flow run (``runtime/retries.py``
says why); each one is logged on the run that makes the call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect.settings import get_current_settings

from compliance_api.client import ComplianceClient
from compliance_api.settings import Settings
from compliance_api.tokens import CustomerKey, TokenBroker, broker_from_settings
from runtime.attempts import guard_write
from runtime.credentials import forget_credentials, load_run_settings, run_settings
from runtime.retries import log_client_retry
from runtime.settings import runtime_settings
from runtime.token_backends import (
    PrefectRateLimiter,
    PrefectTokenLock,
    PrefectVariableTokenStore,
)

#: per (customer key, token store kind, Prefect API): the settings and the broker made from them
_brokers: dict[tuple[CustomerKey, str, str | None], tuple[Settings, TokenBroker]] = {}
_brokers_guard = threading.Lock()
os.register_at_fork(after_in_child=_brokers.clear)  # a forked child renews on its own


def shared_broker(settings: Settings | None = None) -> TokenBroker:
    """The process's broker for the customer key of these settings (created on first use, then
    reused; made anew if the settings changed, e.g. a rotated secret).

    Without ``settings``: the run's settings (a credentials block must have been read already,
    as ``compliance_client()`` and the token task do).
    """
    settings = settings or run_settings()
    kind, api_url = runtime_settings().token_store, get_current_settings().api.url
    identity = (CustomerKey.from_settings(settings), kind, api_url)
    with _brokers_guard:
        cached = _brokers.get(identity)
        if cached is None or cached[0] != settings:
            limiter = PrefectRateLimiter(settings.token_rate_limit_name) if api_url else None
            if kind == "prefect":
                store, lock = PrefectVariableTokenStore(), PrefectTokenLock()
                broker = broker_from_settings(settings, store=store, lock=lock, limiter=limiter)
            else:
                broker = broker_from_settings(settings, limiter=limiter)
            cached = _brokers[identity] = (settings, broker)
        return cached[1]


def forget_brokers() -> None:
    """Drop cached brokers and credentials blocks (tests, or after changing settings in a
    long-lived process)."""
    with _brokers_guard:
        _brokers.clear()
    forget_credentials()


@asynccontextmanager
async def compliance_client(settings: Settings | None = None) -> AsyncIterator[ComplianceClient]:
    """A ``ComplianceClient`` using the shared token; by default the run's settings (the
    credentials block COMPLIANCE_CREDENTIALS_BLOCK names, or the environment)."""
    settings = settings or await load_run_settings()
    on_retry = log_client_retry(settings.max_retries + 1)
    async with ComplianceClient.from_settings(
        settings, shared_broker(settings), on_retry=on_retry, write_guard=guard_write
    ) as client:
        yield client
