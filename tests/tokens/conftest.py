"""Helpers for the token tests: settings for the demo apps, brokers with test-sized backends."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from compliance_api.auth import AccessToken, TokenProvider
from compliance_api.settings import Settings, load_settings
from compliance_api.tokens import BrokerPolicy, SlidingWindowLimiter, TokenBroker
from compliance_api.tokens import broker_from_settings as _broker_from_settings

DATA_ROUTE = "/v1/knowledge-base/resources"


PUBLIC_REDIRECT = "http://127.0.0.1:8765/callback"


class ManualClock:
    """The broker's clock, advanced together with the sandbox's."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@pytest.fixture
def fernet_key() -> str:
    return Fernet.generate_key().decode()


@pytest.fixture
def make_settings(sandbox_reset: Any, tmp_path: Path, fernet_key: str) -> Callable[..., Settings]:
    """Settings for a demo app against the session sandbox, with a private state dir."""

    def make(client_id: str = "demo-manage", **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "base_url": sandbox_reset.url,
            "gov_base_url": sandbox_reset.gov_url,
            "client_id": client_id,
            "client_secret": f"{client_id}-secret-not-real",
            "token_encryption_key": fernet_key,
            "state_dir": tmp_path / "state",
        }
        if client_id == "demo-public":
            values |= {
                "application_type": "integration_public",
                "source_id": "acme",
                "redirect_uri": PUBLIC_REDIRECT,
            }
        elif client_id == "demo-gov-manage":
            values["use_gov"] = True
        values.update(overrides)
        return load_settings(**values)

    return make


def make_broker(settings: Settings, **kwargs: Any) -> TokenBroker:
    """A broker with local store and lock, and an in-process limiter (fresh per test)."""
    kwargs.setdefault("limiter", SlidingWindowLimiter())
    kwargs.setdefault("policy", BrokerPolicy(retry_initial_seconds=0.2, retry_max_seconds=1.0))
    return _broker_from_settings(settings, **kwargs)


async def call_api(base_url: str, provider: TokenProvider, route: str = DATA_ROUTE) -> AccessToken:
    """One data call the way the client makes it: on 401 replace exactly the failed token."""
    token = await provider.get_token()
    async with httpx.AsyncClient(base_url=base_url) as http:
        for _ in range(3):
            headers = {"Authorization": f"Bearer {token.value.get_secret_value()}"}
            response = await http.get(route, headers=headers)
            if response.status_code != 401:
                response.raise_for_status()
                return token
            token = await provider.replace_token(token)
    raise AssertionError("still unauthorized after replacing the token")


def mints(sandbox: Any, client_id: str) -> int:
    return int(sandbox.control.stats()["token_mints"].get(client_id, 0))


def token_requests(sandbox: Any, client_id: str) -> int:
    return int(sandbox.control.stats()["token_requests"].get(client_id, 0))
