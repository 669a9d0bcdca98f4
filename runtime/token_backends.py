"""Prefect-backed parts of the token broker: the shared rate limit, and a store + lock for many
machines kept on the Prefect server itself (no Redis to run).

- ``PrefectRateLimiter``: a global concurrency limit used with ``rate_limit(..., strict=True)``;
  a missing limit is an error naming ``python -m deployments.bootstrap``, never "unthrottled".
- ``PrefectVariableTokenStore``: the encrypted record (ciphertext only) in a Prefect Variable per
  customer key.
- ``PrefectVariableLock``: the token lock per customer key, on top of ``runtime.locks``.
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
from runtime.locks import LEASE_SECONDS, LeaseLockTimeoutError, VariableLeaseLock

BOOTSTRAP_COMMAND = "python -m deployments.bootstrap"
STORE_PREFIX = "compliance-token-"  # noqa: S105 - a name prefix
LOCK_PREFIX = "compliance-token-lock-"  # noqa: S105 - a name prefix


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


class PrefectVariableLock:
    """The token lock per customer key: a ``VariableLeaseLock`` named after the key."""

    def __init__(self, lease_seconds: float = LEASE_SECONDS, poll_seconds: float = 0.25) -> None:
        self.lease = VariableLeaseLock(lease_seconds, poll_seconds)

    @asynccontextmanager
    async def hold(self, key: CustomerKey, *, wait_seconds: float) -> AsyncIterator[None]:
        try:
            lock_id = await self.lease.acquire(
                f"{LOCK_PREFIX}{key.slug}",
                wait_seconds=wait_seconds,
                what=f"the token lock of {key.describe()}",
            )
        except LeaseLockTimeoutError as exc:
            raise TokenLockTimeoutError(str(exc)) from None
        async with self.lease.kept(lock_id):
            yield
