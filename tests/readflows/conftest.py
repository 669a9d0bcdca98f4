"""Read-flow tests: the session sandbox and Prefect server, a private state dir per test.

Events are checked by reading them back from the Prefect test server (the event persister
flushes every few seconds, so ``read_events`` polls until the expected count is stable).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.runner import SandboxHandle

DATA_ROUTES = (
    "GET /v1/knowledge-base/resources",
    "GET /v1/knowledge-base/answer-library",
    "GET /v1/event-logs",
    "GET /v1/resources/package_vulnerability_connectors",
    "GET /v1/resources/user_security_training_status",
    "POST /oauth/token",
)


@pytest.fixture
def reads_env(flow_env: SandboxHandle) -> SandboxHandle:
    """Sandbox reset, demo manage app, private state dir, a generous token-endpoint limit."""
    return flow_env


def calls(sandbox: SandboxHandle, route: str) -> int:
    return int(sandbox.control.stats()["route_counts"].get(route, 0))


def no_calls(sandbox: SandboxHandle) -> bool:
    counts = sandbox.control.stats()["route_counts"]
    return all(counts.get(route, 0) == 0 for route in DATA_ROUTES)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def read_events(
    *,
    names: Sequence[str] | None = None,
    ids: Sequence[uuid.UUID] | None = None,
    since: datetime | None = None,
    expect: int | None = None,
    wait_seconds: float = 15.0,
) -> list[Any]:
    """Events stored by the Prefect server; waits up to ``wait_seconds`` for ``expect`` of them."""
    from prefect.client.orchestration import get_client
    from prefect.events.filters import (
        EventFilter,
        EventIDFilter,
        EventNameFilter,
        EventOccurredFilter,
    )

    event_filter = EventFilter(
        occurred=EventOccurredFilter(
            since=since or datetime(2000, 1, 1, tzinfo=UTC), until=datetime(2100, 1, 1, tzinfo=UTC)
        ),
        event=EventNameFilter(name=list(names)) if names else None,
        id=EventIDFilter(id=list(ids) if ids else []),
    )
    deadline = time.monotonic() + wait_seconds
    found: list[Any] = []
    async with get_client() as client:
        while True:
            page = await client.read_events(filter=event_filter, limit=50)
            found = list(page.events)
            next_page = page.next_page
            while next_page:
                more = await client.read_events_page(str(next_page))
                found.extend(more.events)
                next_page = more.next_page
            if expect is not None and len(found) >= expect:
                return found
            if time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.5)
