"""The token broker's Prefect-backed parts: the shared rate limit, and a store and lock kept on
the Prefect server for workers on several machines (docs/shared-token.md#storage-and-locks).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from prefect.client.schemas.actions import VariableCreate, VariableUpdate
from prefect.client.utilities import get_or_create_client
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
from runtime.locks import LockTimeoutError, hold_lock

BOOTSTRAP_COMMAND = "python -m deployments.bootstrap"
STORE_PREFIX = "compliance-token-"  # noqa: S105 - a name prefix
STORE_TAGS = ["compliance-token"]
#: the token lock of a customer key is the lock ``TOKEN_LOCK_PREFIX + key.slug``
TOKEN_LOCK_PREFIX = "token-"  # noqa: S105 - a name prefix


class PrefectRateLimiter:
    """The token endpoint's budget (5 calls a minute, sized by bootstrap) as a Prefect global
    concurrency limit; a missing limit is an error, never "unthrottled"."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def acquire(self, *, max_wait: float | None = None) -> None:
        """Take a slot; with ``max_wait``, ``TokenRateLimitWaitError`` once that has passed."""
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


class PrefectVariableTokenStore:
    """Ciphertext in a Prefect Variable per customer key.

    A write is one request (update if the last read found the variable, else create; the other
    only if it changed in between), where ``Variable.aset`` would take two or three."""

    def __init__(self) -> None:
        #: per variable: whether the last read (or write) found it on the server
        self._exists: dict[str, bool] = {}

    async def read(self, key: CustomerKey) -> bytes | None:
        name = STORE_PREFIX + key.slug
        client, _ = get_or_create_client()
        try:
            variable = await client.read_variable_by_name(name)
        except (httpx.HTTPError, OSError) as exc:
            raise TokenStoreError(
                f"cannot read the token store on the Prefect server: {type(exc).__name__}"
            ) from None
        self._exists[name] = variable is not None
        value = variable.value if variable is not None else None
        return value.encode() if isinstance(value, str) else None

    async def write(self, key: CustomerKey, ciphertext: bytes) -> None:
        name, value = STORE_PREFIX + key.slug, ciphertext.decode()
        client, _ = get_or_create_client()
        try:
            update = VariableUpdate(name=name, value=value, tags=STORE_TAGS)
            create = VariableCreate(name=name, value=value, tags=STORE_TAGS)
            if self._exists.get(name, False):
                try:
                    await client.update_variable(update)
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != 404:
                        raise
                    await client.create_variable(create)  # deleted since it was read
            else:
                try:
                    await client.create_variable(create)
                except ObjectAlreadyExists:
                    await client.update_variable(update)  # created since it was read
        except (httpx.HTTPError, OSError, ValueError) as exc:
            raise TokenStoreError(
                f"cannot write the token store on the Prefect server: {type(exc).__name__}"
            ) from None
        self._exists[name] = True

    async def delete(self, key: CustomerKey) -> bool:
        name = STORE_PREFIX + key.slug
        self._exists[name] = False
        return await Variable.aunset(name)


class PrefectTokenLock:
    """The token lock per customer key (``runtime/locks.py``); a timeout carries Retry-After."""

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
            raise TokenLockTimeoutError(str(exc), retry_after=exc.retry_after) from None
