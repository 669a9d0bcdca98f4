"""Prefect-backed parts of the token broker: the shared rate limit, and a store + lock for many
machines kept on the Prefect server itself (nothing else to run).

- ``PrefectRateLimiter``: a global concurrency limit used with ``rate_limit(..., strict=True)``;
  a missing limit is an error naming ``python -m deployments.bootstrap``, never "unthrottled".
- ``PrefectVariableTokenStore``: the encrypted record (ciphertext only) in a Prefect Variable per
  customer key.
- ``PrefectTokenLock``: the token lock per customer key, a ``runtime.locks`` lock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError, rate_limit
from prefect.variables import Variable

from compliance_api.errors import ConfigurationError
from compliance_api.tokens import (
    CustomerKey,
    TokenLockTimeoutError,
    TokenRateLimitWaitError,
    TokenStoreError,
)
from runtime.locks import LockTimeoutError, hold_lock

BOOTSTRAP_COMMAND = "python -m deployments.bootstrap"
STORE_PREFIX = "compliance-token-"  # noqa: S105 - a name prefix
#: the token lock of a customer key is the lock ``TOKEN_LOCK_PREFIX + key.slug``
TOKEN_LOCK_PREFIX = "token-"  # noqa: S105 - a name prefix


class PrefectRateLimiter:
    """The token endpoint's budget as a Prefect global concurrency limit (a token bucket).

    Sized by bootstrap as limit 1, decay 1/15 per second: 1 + 60 * 1/15 = 5 calls per minute at
    most, for every process on every machine that talks to this Prefect server.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    async def acquire(self, *, max_wait: float | None = None) -> None:
        """Take a slot; with ``max_wait``, ``TokenRateLimitWaitError`` once that has passed
        (the server cannot say beforehand how long the wait would be)."""
        try:
            await rate_limit(self.name, timeout_seconds=max_wait, strict=True)
        except TimeoutError:
            raise TokenRateLimitWaitError(None, max_wait or 0.0) from None
        except ConcurrencySlotAcquisitionError as exc:
            if "must be created" in str(exc):
                raise ConfigurationError(
                    f"the Prefect global concurrency limit {self.name!r} that throttles the "
                    f"token endpoint does not exist; create it with `{BOOTSTRAP_COMMAND}` "
                    "(token calls are never made unthrottled)"
                ) from None
            raise


def _store_name(key: CustomerKey) -> str:
    return f"{STORE_PREFIX}{key.slug}"


class PrefectVariableTokenStore:
    """Ciphertext in a Prefect Variable per customer key, for workers on many machines."""

    async def read(self, key: CustomerKey) -> bytes | None:
        try:
            value = await Variable.aget(_store_name(key))
        except (httpx.HTTPError, OSError) as exc:
            raise TokenStoreError(
                f"cannot read the token store on the Prefect server: {type(exc).__name__}"
            ) from None
        return value.encode() if isinstance(value, str) else None

    async def write(self, key: CustomerKey, ciphertext: bytes) -> None:
        try:
            await Variable.aset(
                _store_name(key), ciphertext.decode(), tags=["compliance-token"], overwrite=True
            )
        except (httpx.HTTPError, OSError, ValueError) as exc:
            raise TokenStoreError(
                f"cannot write the token store on the Prefect server: {type(exc).__name__}"
            ) from None

    async def delete(self, key: CustomerKey) -> bool:
        return await Variable.aunset(_store_name(key))


class PrefectTokenLock:
    """The token lock per customer key, held across machines (``runtime/locks.py``)."""

    @asynccontextmanager
    async def hold(self, key: CustomerKey, *, wait_seconds: float) -> AsyncIterator[None]:
        try:
            async with hold_lock(
                TOKEN_LOCK_PREFIX + key.slug,
                wait_seconds=wait_seconds,
                what=f"the token lock of {key.describe()}",
            ):
                yield
        except LockTimeoutError as exc:
            raise TokenLockTimeoutError(str(exc)) from None
