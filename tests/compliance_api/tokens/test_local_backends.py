"""The one-machine backends: the flock lock (dies with its holder), limiters, the store."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.fernet import Fernet, MultiFernet
from pydantic import SecretStr

from compliance_api.tokens import (
    CustomerKey,
    FileRateLimiter,
    LocalFileLock,
    LocalFileTokenStore,
    TokenCodec,
    TokenLockTimeoutError,
    TokenRateLimitWaitError,
    TokenRecord,
    TokenStoreError,
)
from sandbox.apps import DEMO_MANAGE
from tests.fixtures.tokens import SlidingWindowLimiter

KEY = CustomerKey("commercial", DEMO_MANAGE.client_id)

HOLDER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from compliance_api.tokens import CustomerKey, LocalFileLock

    async def main():
        lock = LocalFileLock(Path(sys.argv[1]))
        async with lock.hold(CustomerKey(*sys.argv[2:4]), wait_seconds=5):
            print("held", flush=True)
            time.sleep(600)

    asyncio.run(main())
    """
)


def start_holder(directory: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), KEY.tier, KEY.client_id],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


async def test_lock_of_a_killed_holder_is_free_at_once(tmp_path: Path) -> None:
    holder = start_holder(tmp_path)
    lock = LocalFileLock(tmp_path)
    try:
        with pytest.raises(TokenLockTimeoutError, match=f"pid {holder.pid}"):
            async with lock.hold(KEY, wait_seconds=0.3):
                pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        async with lock.hold(KEY, wait_seconds=10):
            pass  # obtained: the kernel released the dead holder's lock
    finally:
        holder.kill()
        holder.wait()


async def test_lock_excludes_tasks_of_one_process(tmp_path: Path) -> None:
    lock, inside, peak = LocalFileLock(tmp_path), [0], [0]

    async def critical() -> None:
        async with lock.hold(KEY, wait_seconds=10):
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            await asyncio.sleep(0.01)
            inside[0] -= 1

    await asyncio.gather(*(critical() for _ in range(10)))
    assert peak[0] == 1


class StepClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_sliding_window_makes_the_sixth_caller_wait() -> None:
    clock = StepClock()
    limiter = SlidingWindowLimiter(5, 60.0, clock=clock)
    for _ in range(5):
        await asyncio.wait_for(limiter.acquire(), 1)
    waiter = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0.05)
    assert not waiter.done()  # waits, does not fail
    clock.now = 60.5
    waiter.cancel()
    await asyncio.wait_for(limiter.acquire(), 1)  # the window moved on: a slot is free


async def test_file_limiter_is_shared_between_instances(tmp_path: Path) -> None:
    path = tmp_path / "limits" / "token-endpoint.json"
    path.parent.mkdir()
    first, second = FileRateLimiter(path), FileRateLimiter(path)
    for limiter in (first, second, first, second, first):
        await asyncio.wait_for(limiter.acquire(), 1)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(second.acquire(), 0.3)


def record(token: str = "access-value") -> TokenRecord:
    now = datetime.now(UTC)
    return TokenRecord(
        key=KEY,
        access_token=SecretStr(token),
        expires_at=now,
        minted_at=now,
        secret_fingerprint="f" * 16,
        refresh_token=SecretStr("refresh-value"),
    )


async def test_store_writes_only_ciphertext_with_private_permissions(tmp_path: Path) -> None:
    store = LocalFileTokenStore(tmp_path / "tokens")
    codec = TokenCodec(MultiFernet([Fernet(Fernet.generate_key())]))
    await store.write(KEY, codec.encrypt(record()))
    path = store.path_for(KEY)
    raw = path.read_bytes()
    assert b"access-value" not in raw and b"refresh-value" not in raw
    assert DEMO_MANAGE.client_id not in path.name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]
    assert await store.delete(KEY) and not await store.delete(KEY)


def test_key_rotation_reads_old_records_and_rejects_unknown_keys() -> None:
    old, new = Fernet(Fernet.generate_key()), Fernet(Fernet.generate_key())
    ciphertext = TokenCodec(MultiFernet([old])).encrypt(record())
    rotated = TokenCodec(MultiFernet([new, old]))
    restored = rotated.decrypt(ciphertext, KEY)
    assert restored.access_token.get_secret_value() == "access-value"
    with pytest.raises(TokenStoreError, match="COMPLIANCE_TOKEN_ENCRYPTION_KEY") as caught:
        TokenCodec(MultiFernet([new])).decrypt(ciphertext, KEY)
    assert "access-value" not in str(caught.value)
    with pytest.raises(TokenStoreError, match="does not belong"):
        rotated.decrypt(ciphertext, CustomerKey("gov", DEMO_MANAGE.client_id))


async def test_sliding_window_with_max_wait_refuses_at_once_and_takes_no_slot() -> None:
    clock = StepClock()
    limiter = SlidingWindowLimiter(5, 60.0, clock=clock)
    for _ in range(5):
        await limiter.acquire(max_wait=0)
    clock.now = 10.0
    with pytest.raises(TokenRateLimitWaitError, match="50 s") as caught:
        await asyncio.wait_for(limiter.acquire(max_wait=30), 1)
    assert caught.value.wait_seconds == pytest.approx(50.0)

    clock.now = 59.9
    waiter = asyncio.create_task(limiter.acquire(max_wait=1.0))  # a slot within 1 s: it waits
    await asyncio.sleep(0.02)
    assert not waiter.done()
    clock.now = 60.0
    await asyncio.wait_for(waiter, 2)
    for _ in range(4):
        await limiter.acquire(max_wait=0)  # the refused call at t=10 took no slot
    with pytest.raises(TokenRateLimitWaitError):
        await limiter.acquire(max_wait=0)


async def test_file_limiter_with_max_wait_refuses_at_once(tmp_path: Path) -> None:
    path = tmp_path / "limits" / "token-endpoint.json"
    limiter = FileRateLimiter(path)
    for _ in range(5):
        await asyncio.wait_for(limiter.acquire(max_wait=0), 1)
    started = asyncio.get_running_loop().time()
    with pytest.raises(TokenRateLimitWaitError, match="rate limit"):
        await asyncio.wait_for(limiter.acquire(max_wait=20), 2)
    assert asyncio.get_running_loop().time() - started < 0.5
