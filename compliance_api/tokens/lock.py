"""The lock that makes "re-read the store, then mint" one step across processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Protocol, runtime_checkable

from compliance_api.tokens.errors import TokenLockTimeoutError
from compliance_api.tokens.filelock import describe_holder, exclusive_flock
from compliance_api.tokens.keys import CustomerKey


@runtime_checkable
class TokenLock(Protocol):
    """Mutual exclusion per key; raises ``TokenLockTimeoutError`` after ``wait_seconds``."""

    def hold(
        self, key: CustomerKey, *, wait_seconds: float
    ) -> AbstractAsyncContextManager[None]: ...


class LocalFileLock:
    """``flock`` on ``<state_dir>/locks/<hash of key>.lock``: one machine, any number of
    processes and threads; released by the kernel the moment its holder dies."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, key: CustomerKey) -> Path:
        return self.directory / f"{key.slug}.lock"

    @asynccontextmanager
    async def hold(self, key: CustomerKey, *, wait_seconds: float) -> AsyncIterator[None]:
        path = self.path_for(key)
        async with exclusive_flock(path, wait_seconds=wait_seconds) as acquired:
            if not acquired:
                raise TokenLockTimeoutError(
                    f"waited {wait_seconds:.0f} s for the token lock of {key.describe()} ({path}); "
                    f"it is held by {describe_holder(path)}, which is minting or waiting for "
                    "the token endpoint's rate limit"
                )
            yield
