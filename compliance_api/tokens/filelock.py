"""An asyncio-friendly exclusive ``flock`` on a file, for locks shared by processes and threads.

``flock`` locks belong to an open file description, and the kernel drops them when the holder
dies (even on ``kill -9``): a crashed process can never leave the lock taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

POLL_SECONDS = 0.02
MAX_POLL_SECONDS = 0.25


def describe_holder(path: Path) -> str:
    """The holder that last wrote its name into the lock file (informational only)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return "an unknown process"
    return text or "an unknown process"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _sign(fd: int) -> None:
    since = datetime.now(UTC).isoformat(timespec="seconds")
    label = f"pid {os.getpid()} on {socket.gethostname()} since {since}"
    os.ftruncate(fd, 0)
    os.pwrite(fd, label.encode(), 0)


@contextlib.asynccontextmanager
async def exclusive_flock(path: Path, *, wait_seconds: float) -> AsyncIterator[bool]:
    """Hold the lock; yields False instead of raising when ``wait_seconds`` pass without it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_seconds
        delay = POLL_SECONDS
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                yield False
                return
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, MAX_POLL_SECONDS)
        try:
            _sign(fd)
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
