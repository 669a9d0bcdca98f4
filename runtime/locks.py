"""Mutual exclusion by name across machines: a Prefect global concurrency limit of one slot.

The Prefect server does the bookkeeping, so the lock holds across workers that share nothing
but the Prefect API:

- a holder takes the slot with a lease of ``LEASE_SECONDS`` that its client renews in the
  background; if renewal fails (the server freed the slot, or could not be reached for the
  whole lease) the body is cancelled, so a holder never carries on without the lock;
- a holder that dies stops renewing, and the server's repossessor frees the slot once the lease
  has expired (it looks every 15 s): a crashed holder blocks others for at most about 75 s;
- expiry is judged by the server's clock alone, and only the server frees a slot;
- a waiter asks again when the server's ``Retry-After`` says (about the limit's average hold),
  not on a fixed poll.

Leases live in the server's lease storage. Prefect keeps them in memory unless told otherwise,
and a restart would then forget a lease while its slot stays taken: the project's servers use
the filesystem storage (``deployments/server_settings.py``); several server replicas need Redis
(docs/scaling.md). Limits are created on first use (one slot, no decay), so a lock needs no
setup; Prefect requires leases of at least 60 s.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency._asyncio import AcquireConcurrencySlotTimeoutError
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

#: seconds a holder's lease lasts without renewal (Prefect's minimum is 60)
LEASE_SECONDS = 60.0
#: every lock's global concurrency limit is named ``LOCK_PREFIX + name``
LOCK_PREFIX = "compliance-lock-"
_NOT_IN_LIMIT_NAMES = re.compile(r"[^a-z0-9_-]+")


class LockTimeoutError(TimeoutError):
    """Another holder kept the lock for the whole wait."""


def limit_name(name: str) -> str:
    """The global concurrency limit behind the lock ``name``.

    A name that had to be changed or shortened gets a hash of the original, so ``"A.b"`` and
    ``"a-b"`` stay two locks.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a lock needs a non-empty name, not {name!r}")
    slug = _NOT_IN_LIMIT_NAMES.sub("-", name.lower())
    if slug != name or len(slug) > 100:
        slug = f"{slug[:64]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return LOCK_PREFIX + slug


async def ensure_lock_limit(name: str) -> str:
    """Create the lock's one-slot limit if it does not exist yet; returns its name."""
    limit = limit_name(name)
    async with get_client() as client:
        try:
            await client.read_global_concurrency_limit_by_name(limit)
        except ObjectNotFound:
            # another process may create it first: the same limit
            with contextlib.suppress(ObjectAlreadyExists):
                await client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=limit, limit=1, slot_decay_per_second=0.0)
                )
    return limit


@asynccontextmanager
async def hold_lock(name: str, *, wait_seconds: float, what: str) -> AsyncIterator[None]:
    """Hold the lock ``name`` for the body; ``LockTimeoutError`` naming ``what`` if another
    holder keeps it for ``wait_seconds``.

    A ``TimeoutError`` raised by the body itself passes through unchanged.
    """
    limit = await ensure_lock_limit(name)
    acquired = False
    try:
        async with concurrency(
            limit,
            occupy=1,
            timeout_seconds=max(wait_seconds, 0.5),
            lease_duration=LEASE_SECONDS,
            strict=True,
            raise_on_lease_renewal_failure=True,
        ):
            acquired = True
            yield
    except AcquireConcurrencySlotTimeoutError:
        if acquired:
            raise
        raise LockTimeoutError(
            f"waited {wait_seconds:g} s for {what} (Prefect global concurrency limit {limit}); "
            "another run holds it"
        ) from None
