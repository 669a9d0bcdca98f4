"""Prefect-backed parts of the token broker: the shared rate limit, and a store + lock for many
machines kept on the Prefect server itself (no Redis to run).

- ``PrefectRateLimiter``: a global concurrency limit used with ``rate_limit(..., strict=True)``;
  a missing limit is an error naming ``python -m deployments.bootstrap``, never "unthrottled".
- ``PrefectVariableTokenStore``: the encrypted record (ciphertext only) in a Prefect Variable per
  customer key.
- ``VariableLeaseLock``: a lease lock by name made of a Prefect Variable: creating a variable
  whose name exists fails with 409, so creation is an atomic test-and-set; the holder renews a
  short lease while it holds the lock, and a dead holder's lease is broken by the next waiter
  after it expires (deleting by id, so two waiters can never both break it). The audit-log
  readers' run lock (``audit_log/checkpoints.py``) uses it too.
- ``PrefectVariableLock``: the token lock per customer key, on top of ``VariableLeaseLock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import VariableCreate
from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError, rate_limit
from prefect.exceptions import ObjectAlreadyExists
from prefect.variables import Variable

from compliance_api.errors import ConfigurationError
from compliance_api.tokens import (
    CustomerKey,
    TokenLockTimeoutError,
    TokenRateLimitWaitError,
    TokenStoreError,
)

BOOTSTRAP_COMMAND = "python -m deployments.bootstrap"
STORE_PREFIX = "compliance-token-"  # noqa: S105 - a name prefix
LOCK_PREFIX = "compliance-token-lock-"  # noqa: S105 - a name prefix
LEASE_SECONDS = 30.0

logger = logging.getLogger(__name__)


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


class LeaseLockTimeoutError(TimeoutError):
    """A ``VariableLeaseLock`` stayed held by another process for the whole wait."""


class VariableLeaseLock:
    """Mutual exclusion by name across machines: a Prefect Variable holding a short lease.

    The holder renews the lease every third of ``lease_seconds`` while it runs; a holder that
    dies stops renewing, and the first waiter to see the lease expired deletes it (by id, so two
    waiters cannot both break it) and takes the lock. A dead holder therefore blocks others for
    at most ``lease_seconds`` plus one poll, with nothing to set up on the server beforehand.
    """

    def __init__(self, lease_seconds: float = LEASE_SECONDS, poll_seconds: float = 0.25) -> None:
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds

    @asynccontextmanager
    async def hold(self, name: str, *, wait_seconds: float, what: str) -> AsyncIterator[None]:
        """Hold the variable ``name`` for the body; ``what`` names the lock in the timeout."""
        lock_id = await self.acquire(name, wait_seconds=wait_seconds, what=what)
        async with self.kept(lock_id):
            yield

    async def acquire(self, name: str, *, wait_seconds: float, what: str) -> UUID:
        """Create the lock variable, waiting up to ``wait_seconds``; returns its id."""
        deadline = time.monotonic() + wait_seconds
        holder = "an unknown process"
        while True:
            async with get_client() as client:
                try:
                    created = await client.create_variable(
                        VariableCreate(name=name, value=self._lease())
                    )
                    return created.id
                except ObjectAlreadyExists:
                    current = await client.read_variable_by_name(name)
            if current is not None and isinstance(current.value, dict):
                holder = str(current.value.get("holder", holder))
                if float(current.value.get("expires_at", 0)) < time.time():
                    await self._delete(current.id)  # a dead holder's lease: break it, by id
                    continue
            if time.monotonic() >= deadline:
                raise LeaseLockTimeoutError(
                    f"waited {wait_seconds:.0f} s for {what} (Prefect variable {name}); "
                    f"it is held by {holder}"
                )
            await asyncio.sleep(self.poll_seconds)

    @asynccontextmanager
    async def kept(self, lock_id: UUID) -> AsyncIterator[None]:
        """Renew the lease of an acquired lock while the body runs, then release it."""
        renewer = asyncio.create_task(self._renew(lock_id))
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await self._delete(lock_id)

    def _lease(self) -> dict[str, Any]:
        return {
            "holder": f"pid {os.getpid()} on {socket.gethostname()}",
            "expires_at": time.time() + self.lease_seconds,
        }

    async def _renew(self, lock_id: UUID) -> None:
        """Renew until cancelled; a failed renewal is retried at the next tick (two are left
        before the lease runs out) instead of ending renewal for the rest of the hold."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                async with get_client() as client:
                    await client.request(
                        "PATCH",
                        "/variables/{id}",
                        path_params={"id": lock_id},
                        json={"value": self._lease()},
                    )
            except (httpx.HTTPError, OSError) as exc:
                logger.warning("Could not renew lock lease %s: %s", lock_id, type(exc).__name__)

    @staticmethod
    async def _delete(lock_id: UUID) -> None:
        async with get_client() as client:
            try:
                await client.request("DELETE", "/variables/{id}", path_params={"id": lock_id})
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code != 404:
                    raise


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
