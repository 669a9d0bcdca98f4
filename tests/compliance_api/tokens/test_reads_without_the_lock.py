"""The broker reads the store without the cross-process lock: a stored usable token is adopted
by every process without a turn at the lock, a waiter adopts the token the holder stores while
it waits, a rejected token is never adopted, and the wait for the lock is still bounded.

Counts, not times: how often the lock was asked for and obtained, how often the store was read,
how many tokens the sandbox minted. "Other processes" are brokers of their own (each has its
own in-memory token and event-loop state) sharing the state directory's store and ``flock``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from compliance_api.auth import AccessToken
from compliance_api.errors import ConfigurationError
from compliance_api.settings import Settings
from compliance_api.tokens import (
    BrokerPolicy,
    CustomerKey,
    LocalFileTokenStore,
    TokenBroker,
    TokenLockTimeoutError,
)
from compliance_api.tokens.factory import local_lock, local_store
from compliance_api.tokens.lock import TokenLock
from sandbox.apps import DEMO_MANAGE
from tests.fixtures.tokens import SlidingWindowLimiter, make_broker, mints

#: a short slice, so the tests that wait for the lock poll quickly (no assertion on time)
POLICY = BrokerPolicy(
    retry_initial_seconds=0.2,
    retry_max_seconds=1.0,
    lock_timeout_seconds=20,
    lock_poll_seconds=0.05,
)


class CountingLock:
    """A lock that counts how often it was asked for and how often it was obtained."""

    def __init__(self, inner: TokenLock) -> None:
        self.inner = inner
        self.asked = 0
        self.held = 0

    @asynccontextmanager
    async def hold(self, key: CustomerKey, *, wait_seconds: float) -> AsyncIterator[None]:
        self.asked += 1
        async with self.inner.hold(key, wait_seconds=wait_seconds):
            self.held += 1
            yield


class CountingStore(LocalFileTokenStore):
    reads = 0

    async def read(self, key: CustomerKey) -> bytes | None:
        self.reads += 1
        return await super().read(key)


class FailingOnceLimiter(SlidingWindowLimiter):
    """The first token-endpoint call fails before it is made (a misconfigured limit)."""

    failed = False

    async def acquire(self, *, max_wait: float | None = None) -> None:
        if not self.failed:
            self.failed = True
            raise ConfigurationError("the token rate limit does not exist (simulated)")
        await super().acquire(max_wait=max_wait)


def process(settings: Settings, **kwargs: Any) -> tuple[TokenBroker, CountingLock, CountingStore]:
    """A broker as another process has it: its own memory, the machine's store and lock."""
    lock, store = CountingLock(local_lock(settings)), CountingStore(local_store(settings).directory)
    kwargs.setdefault("policy", POLICY)
    return make_broker(settings, lock=lock, store=store, **kwargs), lock, store


async def until(condition: Callable[[], bool]) -> None:
    """Let the event loop run until ``condition`` holds (bounded, so a bug cannot hang)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never came true")


async def mint_elsewhere(make_settings: Any, tmp_path: Path) -> tuple[bytes, str]:
    """A token minted by a broker with a state directory of its own: (its stored ciphertext,
    its fingerprint), to be put into the shared store as the lock's holder would."""
    settings = make_settings(state_dir=tmp_path / "elsewhere")
    broker = make_broker(settings)
    token = await broker.get_token()
    ciphertext = await broker.store.read(broker.key)
    assert ciphertext is not None
    return ciphertext, token.fingerprint


async def test_other_processes_adopt_a_stored_token_without_taking_the_lock(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings()
    stored = await make_broker(settings).get_token()  # the first process minted and stored it

    others = [process(settings) for _ in range(8)]  # 8 processes x 5 runs ask at once
    tokens = await asyncio.gather(
        *(broker.get_token() for broker, _, _ in others for _ in range(5))
    )

    assert {token.fingerprint for token in tokens} == {stored.fingerprint}
    assert [lock.asked for _, lock, _ in others] == [0] * 8  # no process queued for the lock
    assert [store.reads for _, _, store in others] == [1] * 8  # one read per process
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 1


async def test_a_waiter_adopts_the_token_the_holder_stores_without_ever_taking_the_lock(
    make_settings: Any, sandbox_reset: Any, tmp_path: Path
) -> None:
    settings = make_settings()
    waiter, lock, store = process(settings)
    ciphertext, minted = await mint_elsewhere(make_settings, tmp_path)

    async with local_lock(settings).hold(waiter.key, wait_seconds=1):  # another process mints
        asking = asyncio.create_task(waiter.get_token())
        await until(lambda: lock.asked >= 2)  # it has waited, read the store again, waits on
        assert not asking.done() and lock.held == 0
        await local_store(settings).write(waiter.key, ciphertext)  # the holder stores its token
        token = await asking  # while the holder still has the lock

    assert token.fingerprint == minted
    assert lock.held == 0
    assert store.reads >= 2  # the read before the lock, and the reads between its tries
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 1  # the holder's mint only


async def test_a_rejected_token_is_never_adopted_from_the_store(
    make_settings: Any, sandbox_reset: Any, tmp_path: Path
) -> None:
    settings = make_settings()
    rejected = await make_broker(settings).get_token()  # stored, then refused with a 401
    ciphertext, replacement = await mint_elsewhere(make_settings, tmp_path)

    waiter, lock, _ = process(settings)
    async with local_lock(settings).hold(waiter.key, wait_seconds=1):
        replacing = asyncio.create_task(waiter.replace_token(rejected))
        await until(lambda: lock.asked >= 3)  # the store still holds the rejected token
        assert not replacing.done()
        await local_store(settings).write(waiter.key, ciphertext)
        token = await replacing
    assert token.fingerprint == replacement != rejected.fingerprint
    assert lock.held == 0

    # With nothing better stored, the rejected token is replaced by a mint under the lock.
    again, lock, _ = process(settings)
    fresh = await again.replace_token(token)
    assert fresh.fingerprint not in (token.fingerprint, rejected.fingerprint)
    assert (lock.asked, lock.held) == (1, 1)
    # the first, the one elsewhere, and this replacement
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 3


async def test_the_wait_for_the_lock_is_still_bounded(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings()
    policy = BrokerPolicy(lock_timeout_seconds=0.5, lock_poll_seconds=0.1)
    waiter, lock, store = process(settings, policy=policy)
    async with local_lock(settings).hold(waiter.key, wait_seconds=1):  # a holder that never stores
        with pytest.raises(TokenLockTimeoutError, match="0.5 s"):
            await waiter.get_token()
    assert lock.asked >= 2 and lock.held == 0  # asked in slices, never obtained
    assert store.reads == lock.asked  # once before the lock, then after each slice but the last
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 0


async def test_callers_of_one_process_share_one_renewal(
    make_settings: Any, sandbox_reset: Any
) -> None:
    broker, lock, store = process(make_settings())
    tokens = await asyncio.gather(*(broker.get_token() for _ in range(20)))
    assert len({token.fingerprint for token in tokens}) == 1
    assert (lock.asked, lock.held) == (1, 1)
    assert store.reads == 2  # before the lock and under it
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 1


async def test_a_failed_renewal_is_retried_by_one_of_its_waiters(
    make_settings: Any, sandbox_reset: Any
) -> None:
    broker, lock, _ = process(make_settings(), limiter=FailingOnceLimiter())
    results = await asyncio.gather(*(broker.get_token() for _ in range(10)), return_exceptions=True)
    errors = [result for result in results if isinstance(result, BaseException)]
    tokens = [result for result in results if isinstance(result, AccessToken)]
    assert len(errors) == 1 and isinstance(errors[0], ConfigurationError)
    assert len(tokens) == 9 and len({token.fingerprint for token in tokens}) == 1
    assert lock.held == 2  # the failed renewal, then one more for all the others
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 1


async def test_a_waiter_that_is_cancelled_does_not_cancel_the_renewal(
    make_settings: Any, sandbox_reset: Any
) -> None:
    broker, lock, _ = process(make_settings())
    renewing = asyncio.create_task(broker.get_token())
    waiting = asyncio.create_task(broker.get_token())
    await until(lambda: lock.asked >= 1)  # the first is renewing, the second waits for it
    waiting.cancel()
    token = await renewing
    assert token.fingerprint and waiting.cancelled()
    assert (await broker.get_token()).fingerprint == token.fingerprint
    assert lock.held == 1 and mints(sandbox_reset, DEMO_MANAGE.client_id) == 1
