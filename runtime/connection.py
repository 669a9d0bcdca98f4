"""How every task gets a client: ``async with compliance_client() as client:``.

The client is wired to the process-wide token broker, so all tasks, flow runs and threads of a
process share one cached token, and all processes share one stored token (see
``runtime/token_backends.py`` for the rule that picks the backends).

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
from typing import Literal

from prefect.settings import get_current_settings

from compliance_api.client import ComplianceClient
from compliance_api.settings import Settings
from compliance_api.tokens import TokenBroker, broker_from_settings, secret_fingerprint
from compliance_api.tokens.factory import local_limiter, local_lock, local_store
from compliance_api.tokens.limiter import RateLimiter
from compliance_api.tokens.lock import TokenLock
from compliance_api.tokens.store import TokenStore
from runtime.attempts import guard_write
from runtime.credentials import forget_credentials, load_run_settings, run_settings
from runtime.retries import log_client_retry
from runtime.settings import runtime_settings
from runtime.token_backends import (
    PrefectRateLimiter,
    PrefectTokenLock,
    PrefectVariableTokenStore,
)

StoreKind = Literal["local", "prefect"]

_brokers: dict[tuple[object, ...], TokenBroker] = {}
_brokers_guard = threading.Lock()


def prefect_api_configured() -> bool:
    return bool(get_current_settings().api.url)


def store_kind() -> StoreKind:
    """COMPLIANCE_TOKEN_STORE, checked by ``RuntimeSettings``."""
    return runtime_settings().token_store


def _limiter(settings: Settings) -> RateLimiter:
    if prefect_api_configured():
        return PrefectRateLimiter(settings.token_rate_limit_name)
    return local_limiter(settings)


def _store_and_lock(settings: Settings, kind: StoreKind) -> tuple[TokenStore, TokenLock]:
    if kind == "prefect":
        return PrefectVariableTokenStore(), PrefectTokenLock()
    return local_store(settings), local_lock(settings)


def shared_broker(settings: Settings | None = None) -> TokenBroker:
    """The process-wide broker for these settings (created on first use, then reused).

    Without ``settings``: the run's settings (a credentials block must have been read already,
    as ``compliance_client()`` and the token task do).
    """
    settings = settings or run_settings()
    kind = store_kind()
    identity = (
        os.getpid(),
        settings.tier,
        settings.api_base_url,
        settings.client_id,
        settings.source_id,
        secret_fingerprint(settings.client_secret),
        str(settings.state_dir),
        kind,
        prefect_api_configured() and get_current_settings().api.url,
    )
    with _brokers_guard:
        broker = _brokers.get(identity)
        if broker is None:
            store, lock = _store_and_lock(settings, kind)
            broker = broker_from_settings(
                settings, store=store, lock=lock, limiter=_limiter(settings)
            )
            _brokers[identity] = broker
        return broker


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
