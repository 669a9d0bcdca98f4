"""Mutual exclusion by name across machines, kept on the Prefect server (no Redis to run).

``VariableLeaseLock`` is a lease lock made of a Prefect Variable: creating a variable whose name
exists fails with 409, so creation is an atomic test-and-set; the holder renews a short lease
while it holds the lock, and a dead holder's lease is broken by the next waiter after it expires
(deleting by id, so two waiters can never both break it). The token lock
(``runtime/token_backends.py``) and the audit-log readers' run lock
(``audit_log/checkpoints.py``) use it.
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
from prefect.exceptions import ObjectAlreadyExists

logger = logging.getLogger(__name__)

LEASE_SECONDS = 30.0


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
