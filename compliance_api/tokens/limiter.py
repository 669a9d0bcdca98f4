"""The token endpoint's budget: 5 calls a minute shared by mint, refresh and suspend. Callers
wait for a slot; with ``max_wait`` a slot further away raises ``TokenRateLimitWaitError`` (a
30 s authorization code must not wait a minute)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from filelock import AsyncFileLock, Timeout

from compliance_api.files import write_private
from compliance_api.tokens.errors import TokenRateLimitWaitError

TOKEN_ENDPOINT_CALLS_PER_WINDOW = 5
WINDOW_SECONDS = 60.0
# The server counts arrivals, we count departures: a second of slack absorbs latency and skew.
SAFETY_SECONDS = 1.0
_WINDOW = WINDOW_SECONDS + SAFETY_SECONDS
#: the longest wait for the file guarding the window (its holder only reads and writes it)
LOCK_TIMEOUT_SECONDS = 30.0


@runtime_checkable
class RateLimiter(Protocol):
    """Waits for a slot; past ``max_wait`` (seconds) raises ``TokenRateLimitWaitError`` instead
    (at once if it can tell, else after ``max_wait``), taking no slot."""

    async def acquire(self, *, max_wait: float | None = None) -> None: ...


def refuse_beyond(max_wait: float | None, waited: float, wait: float) -> None:
    """Raise ``TokenRateLimitWaitError`` if waiting ``wait`` more would exceed ``max_wait``."""
    if max_wait is not None and waited + wait > max_wait:
        raise TokenRateLimitWaitError(wait, max_wait - waited)


class FileRateLimiter:
    """A sliding window in a ``flock``-guarded file, shared by every process of the machine."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def acquire(self, *, max_wait: float | None = None) -> None:
        started = time.monotonic()
        while True:
            waited = time.monotonic() - started
            lock_wait = LOCK_TIMEOUT_SECONDS if max_wait is None else max(0.0, max_wait - waited)
            wait = await self._try_take(min(LOCK_TIMEOUT_SECONDS, lock_wait))
            if wait <= 0:
                return
            refuse_beyond(max_wait, time.monotonic() - started, wait)
            await asyncio.sleep(wait)

    async def _try_take(self, lock_wait: float) -> float:
        """Take a slot (0.0) or say how long until one frees; the file guard waits ``lock_wait``."""
        guard = AsyncFileLock(self.path.with_suffix(".lock"), timeout=max(0.0, lock_wait))
        try:
            held = await guard.acquire()
        except Timeout:
            return 0.1  # busy (or a crashed holder released it already): poll again
        async with held:
            now = time.time()
            stamps = [stamp for stamp in self._read() if stamp > now - _WINDOW]
            if len(stamps) >= TOKEN_ENDPOINT_CALLS_PER_WINDOW:
                return min(stamps) + _WINDOW - now
            stamps.append(now)
            write_private(self.path, json.dumps(stamps))
            return 0.0

    def _read(self) -> list[float]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return []
        return [float(stamp) for stamp in data] if isinstance(data, list) else []
