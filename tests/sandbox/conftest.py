"""Fixtures for the sandbox's own tests: an HTTP client that checks every response it gets.

Every data response is validated against the published schema of its operation (or, for
errors, against the documented error shape), so each test also proves the schemas hold.

Helpers live in ``tests/fixtures/sandbox_api.py``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from sandbox.runner import SandboxHandle
from tests.fixtures.sandbox_api import (
    Api,
    Env,
    OAuth,
)


@pytest.fixture
def env(sandbox_reset: SandboxHandle) -> Iterator[Env]:
    """A reset sandbox, clients for both tiers and a manage-app token for data calls."""
    with (
        httpx.Client(base_url=sandbox_reset.url, timeout=30) as http,
        httpx.Client(base_url=sandbox_reset.gov_url, timeout=30) as gov_http,
    ):
        oauth = OAuth(http)
        yield Env(
            sandbox=sandbox_reset,
            http=http,
            gov_http=gov_http,
            oauth=oauth,
            gov_oauth=OAuth(gov_http),
            api=Api(http, None),
            seed=sandbox_reset.control.seed(),
        )


@pytest.fixture
def api(env: Env) -> Api:
    env.api.token = env.oauth.token()
    return env.api
