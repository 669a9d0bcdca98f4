"""How every task gets a client: ``async with compliance_client() as client:``.

The client shares its process's token broker per customer key (one token in memory, one renewal
at a time; one stored token across processes). Backends: the rate limiter is the Prefect global
concurrency limit when a Prefect API is configured, else a file limiter; store and lock follow
``COMPLIANCE_TOKEN_STORE`` (docs/shared-token.md#storage-and-locks). Every write, retries
included, waits at ``runtime.attempts.WRITE_FENCE``; each client retry is logged on the run.
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
from runtime.attempts import WRITE_FENCE
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
    """The process's broker for these settings' customer key, made anew if the settings changed
    (e.g. a rotated secret). Default: the run's settings (a block must have been read already)."""
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
    """Drop cached brokers and credentials blocks (tests, long-lived processes)."""
    with _brokers_guard:
        _brokers.clear()
    forget_credentials()


@asynccontextmanager
async def compliance_client(settings: Settings | None = None) -> AsyncIterator[ComplianceClient]:
    """A ``ComplianceClient`` using the shared token; by default with the run's settings."""
    settings = settings or await load_run_settings()
    on_retry = log_client_retry(settings.max_retries + 1)
    async with ComplianceClient.from_settings(
        settings, shared_broker(settings), on_retry=on_retry, write_fence=WRITE_FENCE
    ) as client:
        yield client
