"""The lock that makes "re-read the store, then mint" one step across processes."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from filelock import AsyncFileLock, Timeout

from compliance_api.tokens.errors import TokenLockTimeoutError
from compliance_api.tokens.keys import CustomerKey


@runtime_checkable
class TokenLock(Protocol):
    """Mutual exclusion per key; raises ``TokenLockTimeoutError`` after ``wait_seconds``."""

    def hold(
        self, key: CustomerKey, *, wait_seconds: float
    ) -> AbstractAsyncContextManager[None]: ...


def _sign(fd: int) -> None:
    """Write the holder into the lock file, for the message of a waiter that gives up."""
    since = datetime.now(UTC).isoformat(timespec="seconds")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {since}".encode(), 0)


class LocalFileLock:
    """``flock`` on ``<state_dir>/locks/<hash of key>.lock`` for one machine; the kernel drops it
    the moment its holder dies, even on ``kill -9``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @asynccontextmanager
    async def hold(self, key: CustomerKey, *, wait_seconds: float) -> AsyncIterator[None]:
        path = self.directory / f"{key.slug}.lock"
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = AsyncFileLock(path, timeout=max(0.0, wait_seconds), mode=0o600, on_acquired=_sign)
        try:
            held = await lock.acquire()
        except Timeout:
            try:
                holder = path.read_text().strip() or "an unknown process"
            except OSError:
                holder = "an unknown process"
            raise TokenLockTimeoutError(
                f"waited {wait_seconds:.0f} s for the token lock of {key.describe()} ({path}); "
                f"it is held by {holder}, which is minting or waiting for the token endpoint's "
                "rate limit"
            ) from None
        async with held:
            yield
