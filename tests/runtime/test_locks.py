"""The lock across machines (runtime/locks.py), against the session's real Prefect server."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from prefect.client.orchestration import get_client

from compliance_api.tokens import (
    BrokerPolicy,
    CustomerKey,
    LocalFileTokenStore,
    TokenLockTimeoutError,
)
from runtime.locks import LOCK_PREFIX, LockTimeoutError, hold_lock, limit_name
from runtime.token_backends import TOKEN_LOCK_PREFIX, PrefectTokenLock
from sandbox.apps import DEMO_MANAGE
from tests.fixtures.tokens import make_broker, mints

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_lock_names_map_to_distinct_valid_limit_names() -> None:
    assert limit_name("token-abc") == f"{LOCK_PREFIX}token-abc"
    assert limit_name("A.b") != limit_name("a-b")
    assert len(limit_name("x" * 500)) < 120
    with pytest.raises(ValueError, match="non-empty"):
        limit_name(" ")


async def test_a_held_lock_keeps_others_out_and_is_free_once_released() -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"
    async with hold_lock(name, wait_seconds=5, what="the test lock"):
        with pytest.raises(LockTimeoutError, match="the test lock"):
            async with hold_lock(name, wait_seconds=1, what="the test lock"):
                pass
        async with get_client() as client:
            limit = await client.read_global_concurrency_limit_by_name(limit_name(name))
        assert (limit.limit, limit.active_slots) == (1, 1)
    async with hold_lock(name, wait_seconds=5, what="the test lock"):
        pass
    async with get_client() as client:
        limit = await client.read_global_concurrency_limit_by_name(limit_name(name))
    assert limit.active_slots == 0


async def test_waiters_take_turns_and_never_overlap() -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"
    inside: list[int] = []
    overlaps = 0

    async def worker(number: int) -> None:
        nonlocal overlaps
        async with hold_lock(name, wait_seconds=60, what="the test lock"):
            overlaps += len(inside)
            inside.append(number)
            await asyncio.sleep(0.05)
            inside.remove(number)

    await asyncio.gather(*(worker(n) for n in range(6)))
    assert overlaps == 0


async def test_a_timeout_raised_inside_the_body_is_not_taken_for_a_busy_lock() -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TimeoutError) as raised:
        async with hold_lock(name, wait_seconds=5, what="the test lock"):
            raise TimeoutError("the body's own timeout")
    assert not isinstance(raised.value, LockTimeoutError)
    async with hold_lock(name, wait_seconds=5, what="the test lock"):
        pass  # and the lock was released


async def test_a_broker_waiting_in_slices_asks_the_server_only_when_due(
    make_settings: Any, sandbox_reset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token broker waits for the lock in short slices and reads the store before each, but
    asks the server for the slot only when the last refusal's Retry-After (about the limit's
    average hold, seconds) has passed; and its refused requests leave no slot taken."""
    import runtime.locks

    requests = 0
    original = runtime.locks.concurrency  # type: ignore[attr-defined]

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal requests
        requests += 1
        return original(*args, **kwargs)

    class CountingStore(LocalFileTokenStore):
        reads = 0

        async def read(self, key: CustomerKey) -> bytes | None:
            self.reads += 1
            return await super().read(key)

    settings = make_settings()
    store = CountingStore(settings.state_dir / "tokens")
    policy = BrokerPolicy(lock_timeout_seconds=1.5, lock_poll_seconds=0.05)
    broker = make_broker(settings, store=store, lock=PrefectTokenLock(), policy=policy)
    name = TOKEN_LOCK_PREFIX + broker.key.slug
    async with hold_lock(name, wait_seconds=5, what="the test lock"):  # another machine mints
        monkeypatch.setattr(runtime.locks, "concurrency", counting)
        with pytest.raises(TokenLockTimeoutError, match="1.5 s"):
            await broker.get_token()
        assert 1 <= requests < store.reads  # every slice read the store; few asked the server
    async with hold_lock(name, wait_seconds=0, what="the test lock"):
        pass  # at once: no slot was left taken
    async with get_client() as client:
        limit = await client.read_global_concurrency_limit_by_name(limit_name(name))
    assert limit.active_slots == 0
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 0
