"""Mutual exclusion by name across machines: a one-slot Prefect global concurrency limit.

The holder's lease is renewed in the background and the body is cancelled if renewal fails; a
dead holder's slot is freed by the server once the lease expires (about 75 s). Limits are
created on first use. How waiting works and why: docs/scaling.md#3-one-token-for-all-of-them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError, concurrency
from prefect.exceptions import ObjectAlreadyExists

#: seconds a holder's lease lasts without renewal (Prefect's minimum is 60)
LEASE_SECONDS = 60.0
#: every lock's global concurrency limit is named ``LOCK_PREFIX + name``
LOCK_PREFIX = "compliance-lock-"
_NOT_IN_LIMIT_NAMES = re.compile(r"[^a-z0-9_-]+")
#: seconds to wait after a refusal whose Retry-After cannot be read
DEFAULT_RETRY_SECONDS = 1.0


class LockTimeoutError(TimeoutError):
    """Another holder kept the lock for the whole wait; ``retry_after``: what was left of the
    server's last Retry-After."""

    def __init__(self, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def limit_name(name: str) -> str:
    """The limit behind lock ``name``; a slugged or shortened name gets a hash of the original,
    so ``"A.b"`` and ``"a-b"`` stay two locks."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a lock needs a non-empty name, not {name!r}")
    slug = _NOT_IN_LIMIT_NAMES.sub("-", name.lower())
    if slug != name or len(slug) > 100:
        slug = f"{slug[:64]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return LOCK_PREFIX + slug


async def _create_limit(limit: str) -> None:
    """Create the one-slot limit (another process creating it first is fine)."""
    async with get_client() as client:
        with contextlib.suppress(ObjectAlreadyExists):
            await client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=limit, limit=1, slot_decay_per_second=0.0)
            )


def _refusal_retry_after(error: ConcurrencySlotAcquisitionError) -> float | None:
    """The Retry-After of a refusal (423: the slot is taken); None for any other error."""
    cause = error.__cause__
    if not isinstance(cause, httpx.HTTPStatusError) or cause.response.status_code != 423:
        return None
    try:
        return max(0.0, float(cause.response.headers.get("Retry-After", DEFAULT_RETRY_SECONDS)))
    except ValueError:
        return DEFAULT_RETRY_SECONDS


@asynccontextmanager
async def hold_lock(name: str, *, wait_seconds: float, what: str) -> AsyncIterator[None]:
    """Hold the lock ``name`` for the body; ``LockTimeoutError`` naming ``what`` if another
    holder keeps it for ``wait_seconds``. One request per refusal's Retry-After, never cut
    short; a ``TimeoutError`` from the body passes through unchanged."""
    limit = limit_name(name)
    created = False
    deadline = time.monotonic() + wait_seconds
    while True:
        acquired = False
        try:
            async with concurrency(
                limit,
                occupy=1,
                max_retries=0,  # one request; the waiting is done here
                lease_duration=LEASE_SECONDS,
                strict=True,
                raise_on_lease_renewal_failure=True,
            ):
                acquired = True
                yield
            return
        except ConcurrencySlotAcquisitionError as exc:
            if acquired:
                raise
            if "must be created" in str(exc) and not created:  # the lock's first use here
                await _create_limit(limit)
                created = True
                continue
            retry_after = _refusal_retry_after(exc)
            if retry_after is None:
                raise
        remaining = deadline - time.monotonic()
        await asyncio.sleep(max(0.0, min(retry_after, remaining)))
        if retry_after > remaining:
            raise LockTimeoutError(
                f"waited {wait_seconds:g} s for {what} (Prefect global concurrency limit "
                f"{limit}); another run holds it",
                retry_after - max(0.0, remaining),
            )
