"""Prefect-backed parts against the real test server: rate limit, bootstrap, variable store
and token lock (the many-machines backends)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound
from prefect.variables import Variable

from compliance_api.errors import ConfigurationError
from compliance_api.tokens import (
    CustomerKey,
    TokenLockTimeoutError,
    TokenRateLimitWaitError,
)
from deployments.bootstrap import (
    TOKEN_RATE_LIMIT_DECAY_PER_SECOND,
    bootstrap,
    ensure_token_rate_limit,
    main,
    token_rate_limit_name,
)
from runtime.locks import limit_name
from runtime.token_backends import (
    TOKEN_LOCK_PREFIX,
    PrefectRateLimiter,
    PrefectTokenLock,
    PrefectVariableTokenStore,
)
from sandbox.apps import DEMO_MANAGE
from tests.fixtures.tokens import SlidingWindowLimiter, call_api, make_broker, mints

pytestmark = pytest.mark.usefixtures("prefect_server")


async def test_missing_rate_limit_is_a_clear_error_naming_bootstrap() -> None:
    limiter = PrefectRateLimiter(f"missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ConfigurationError, match=r"python -m deployments\.bootstrap"):
        await limiter.acquire()


async def test_bootstrap_is_idempotent(capsys: pytest.CaptureFixture[str]) -> None:
    name = token_rate_limit_name()
    async with get_client() as client:
        with contextlib.suppress(ObjectNotFound):
            await client.delete_global_concurrency_limit_by_name(name)
    assert (await bootstrap())[0].startswith("created")
    assert (await bootstrap())[0].startswith("kept")
    async with get_client() as client:
        limit = await client.read_global_concurrency_limit_by_name(name)
        await client.update_global_concurrency_limit(name, _update(limit=3))
    assert (await ensure_token_rate_limit()).startswith("updated")
    async with get_client() as client:
        limit = await client.read_global_concurrency_limit_by_name(name)
    assert limit.limit + 60 * (limit.slot_decay_per_second or 0) <= 5
    assert limit.slot_decay_per_second == pytest.approx(TOKEN_RATE_LIMIT_DECAY_PER_SECOND)
    await asyncio.to_thread(main)
    assert "kept global concurrency limit" in capsys.readouterr().out


def _update(**fields: Any) -> Any:
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    return GlobalConcurrencyLimitUpdate(**fields)


async def test_prefect_rate_limit_makes_callers_wait() -> None:
    name = f"bucket-{uuid.uuid4().hex[:8]}"
    async with get_client() as client:
        await client.upsert_global_concurrency_limit_by_name(
            name, limit=1, slot_decay_per_second=1.0
        )
    limiter = PrefectRateLimiter(name)
    await asyncio.wait_for(limiter.acquire(), 10)
    # The bucket is empty: the next caller waits (it is not refused, and not let through).
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(limiter.acquire(), 0.3)
    await asyncio.sleep(1.5)  # let the abandoned waiter take its slot before the server stops


async def test_prefect_rate_limit_wait_is_bounded_by_max_wait() -> None:
    name = f"bucket-{uuid.uuid4().hex[:8]}"
    async with get_client() as client:
        await client.upsert_global_concurrency_limit_by_name(
            name, limit=1, slot_decay_per_second=0.05
        )
    limiter = PrefectRateLimiter(name)
    await asyncio.wait_for(limiter.acquire(max_wait=5), 10)
    started = time.monotonic()
    # The next slot is ~20 s away: a caller with a deadline gets an error, not a 20 s wait.
    with pytest.raises(TokenRateLimitWaitError, match="rate limit"):
        await asyncio.wait_for(limiter.acquire(max_wait=0.5), 10)
    assert time.monotonic() - started < 5


async def test_two_machines_share_one_token_through_the_prefect_server(
    make_settings: Any, sandbox_reset: Any, tmp_path: Any
) -> None:
    limiter = SlidingWindowLimiter()
    brokers = [
        make_broker(
            make_settings(state_dir=tmp_path / f"machine-{n}"),
            store=PrefectVariableTokenStore(),
            lock=PrefectTokenLock(),
            limiter=limiter,
        )
        for n in range(2)
    ]
    tokens = await asyncio.gather(*(call_api(sandbox_reset.url, b) for b in brokers * 10))
    assert len({token.fingerprint for token in tokens}) == 1
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 1
    stored = await Variable.aget(f"compliance-token-{brokers[0].key.slug}")
    assert isinstance(stored, str) and tokens[0].value.get_secret_value() not in stored
    assert await brokers[0].disconnect()  # client_credentials: deletes, no suspend
    assert await Variable.aget(f"compliance-token-{brokers[0].key.slug}") is None


async def test_the_token_lock_is_one_slot_on_the_server_per_customer_key() -> None:
    key = CustomerKey("commercial", f"lock-{uuid.uuid4().hex[:8]}")
    other = CustomerKey("commercial", f"lock-{uuid.uuid4().hex[:8]}")
    async with PrefectTokenLock().hold(key, wait_seconds=5):
        with pytest.raises(TokenLockTimeoutError, match="the token lock of"):
            async with PrefectTokenLock().hold(key, wait_seconds=0.5):
                pass
        async with PrefectTokenLock().hold(other, wait_seconds=1):
            pass  # another customer's lock is another slot
        async with get_client() as client:
            limit = await client.read_global_concurrency_limit_by_name(
                limit_name(TOKEN_LOCK_PREFIX + key.slug)
            )
        assert (limit.limit, limit.active_slots) == (1, 1)
    async with PrefectTokenLock().hold(key, wait_seconds=1):
        pass


async def test_the_variable_store_writes_whatever_happened_to_the_variable_since_its_read() -> None:
    key = CustomerKey("commercial", f"store-{uuid.uuid4().hex[:8]}")
    name = f"compliance-token-{key.slug}"
    first, second = PrefectVariableTokenStore(), PrefectVariableTokenStore()
    assert await first.read(key) is None
    await first.write(key, b"one")  # missing when read: created
    assert await first.read(key) == b"one"
    await second.write(key, b"two")  # never read, but it exists: updated
    assert await Variable.aget(name) == "two"
    await Variable.aunset(name)  # deleted behind the first store's back
    await first.write(key, b"three")  # it existed when last read: created again
    assert await second.read(key) == b"three"
    assert await first.delete(key) and await first.read(key) is None
