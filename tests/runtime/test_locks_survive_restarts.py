"""A lock whose holder was killed is free again within 90 s, even across a Prefect server
restart (PostgreSQL-backed ``prefect server start``: the lease repossessor runs there, and the
project's filesystem lease storage keeps the lease through the restart)."""

from __future__ import annotations

import textwrap
import uuid

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from deployments.prefect_server import PrefectServer
from runtime.locks import LEASE_SECONDS, LockTimeoutError, hold_lock
from tests.fixtures.chaos import child_env, kill_hard, start_child

#: the bound the project promises for a crashed holder (lease 60 s + repossessor every 15 s)
CRASHED_HOLDER_BOUND_SECONDS = 90

pytestmark = pytest.mark.timeout(300)


async def test_a_killed_holder_blocks_others_for_at_most_90_s_even_across_a_restart(
    postgres_prefect_server: PrefectServer,
) -> None:
    assert LEASE_SECONDS + 15 < CRASHED_HOLDER_BOUND_SECONDS
    name = f"restart-{uuid.uuid4().hex[:8]}"
    code = textwrap.dedent(
        f"""
        import asyncio
        from runtime.locks import hold_lock

        async def main():
            async with hold_lock({name!r}, wait_seconds=30, what="the test lock"):
                print("HELD", flush=True)
                await asyncio.sleep(600)

        asyncio.run(main())
        """
    )
    child = start_child(code, child_env({"PREFECT_API_URL": postgres_prefect_server.api_url}))
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "HELD"
    kill_hard(child)
    postgres_prefect_server.restart()

    with temporary_settings({PREFECT_API_URL: postgres_prefect_server.api_url}):
        with pytest.raises(LockTimeoutError):  # the restart did not forget the dead holder...
            async with hold_lock(name, wait_seconds=1, what="the test lock"):
                pass
        # ...nor keep its slot for ever
        async with hold_lock(name, wait_seconds=CRASHED_HOLDER_BOUND_SECONDS, what="the lock"):
            pass
