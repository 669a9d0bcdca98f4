"""The lock across machines (runtime/locks.py), against the session's real Prefect server."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from prefect.client.orchestration import get_client

from runtime.locks import LOCK_PREFIX, LockTimeoutError, hold_lock, limit_name

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
