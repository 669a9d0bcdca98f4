"""Fixtures for the data-client tests: published schemas and a schema-checking fake API.

The fake runs inside ``httpx.MockTransport`` (no sockets, no sandbox): it is only used for what
the sandbox cannot be told to do precisely (a given status sequence, a dropped connection, a
server that echoes a token). Every request body it receives is validated against the
operation's published request schema, so any client test doubles as a contract test.

Helpers live in ``tests/fixtures/fake_api.py``."""

from __future__ import annotations

from typing import Any

import pytest

from compliance_api.client import ComplianceClient
from tests.fixtures.fake_api import (
    BASE_URL,
    FAST_RETRIES,
    FakeAPI,
    InMemoryTokenProvider,
    load_schemas,
    minting_provider,
)


@pytest.fixture(scope="session")
def schemas() -> dict[str, dict[str, Any]]:
    return load_schemas()


@pytest.fixture
def api(schemas: dict[str, dict[str, Any]]) -> FakeAPI:
    return FakeAPI(schemas)


@pytest.fixture
def provider() -> InMemoryTokenProvider:
    return minting_provider()


@pytest.fixture
async def client(api: FakeAPI, provider: InMemoryTokenProvider) -> Any:
    async with ComplianceClient(
        BASE_URL, provider, transport=api.transport(), retry_policy=FAST_RETRIES
    ) as instance:
        yield instance
