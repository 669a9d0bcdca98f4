"""Public integrations: authorization code, state, refresh rotation, outages, disconnect."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from compliance_api.cli import main as cli_main
from compliance_api.errors import InvalidClientError
from compliance_api.oauth import (
    ReauthorizationRequiredError,
    StateMismatchError,
    build_authorization_request,
)
from compliance_api.settings import Settings
from compliance_api.tokens import LocalFileTokenStore, NotConnectedError, TokenStoreError
from compliance_api.tokens.keys import CustomerKey
from sandbox.apps import DEMO_PUBLIC
from tests.fixtures.tokens import (
    PUBLIC_REDIRECT,
    ManualClock,
    approve,
    call_api,
    make_broker,
    mints,
)

SUSPEND_ROUTE = "POST /v1/oauth/token/suspend"


def public_route(sandbox: Any) -> str:
    """A route the integration scopes allow (connector resources need a resource id)."""
    resource = sandbox.control.seed()["package_vulnerability_resources"][0]
    return f"/v1/resources/package_vulnerability_connectors?resourceId={resource}"


class FlakyStore(LocalFileTokenStore):
    """The local store whose next ``failures`` writes fail (a full disk, a lost mount)."""

    failures = 0

    async def write(self, key: CustomerKey, ciphertext: bytes) -> None:
        if self.failures:
            self.failures -= 1
            raise TokenStoreError("disk full (simulated)")
        await super().write(key, ciphertext)


async def connect(sandbox: Any, broker: Any, settings: Settings) -> None:
    request = build_authorization_request(settings)
    redirect = approve(sandbox, settings, request.state)
    await broker.connect(redirect["code"], redirect["state"], request.state)


def test_authorization_url_carries_state_and_customer(make_settings: Any) -> None:
    settings = make_settings(DEMO_PUBLIC)
    request = build_authorization_request(settings)
    assert request.url.startswith(f"{settings.base_url}/oauth/authorize?")
    for part in (f"client_id={DEMO_PUBLIC.client_id}", "source_id=acme", "response_type=code"):
        assert part in request.url
    assert f"state={request.state}" in request.url
    assert build_authorization_request(settings).state != request.state


async def test_code_exchange_then_data_calls(make_settings: Any, sandbox_reset: Any) -> None:
    settings = make_settings(DEMO_PUBLIC)
    broker = make_broker(settings)
    await connect(sandbox_reset, broker, settings)
    await call_api(settings.base_url, broker, public_route(sandbox_reset))
    status = await broker.status()
    assert status is not None and status.has_refresh_token
    assert mints(sandbox_reset, DEMO_PUBLIC.client_id) == 1


async def test_state_mismatch_aborts_before_any_request(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    request = build_authorization_request(settings)
    redirect = approve(sandbox_reset, settings, "forged-state")
    with pytest.raises(StateMismatchError, match="does not match"):
        await make_broker(settings).connect(redirect["code"], redirect["state"], request.state)
    assert sandbox_reset.control.stats()["token_requests"].get(DEMO_PUBLIC.client_id, 0) == 0


async def test_code_older_than_30_seconds_asks_for_reauthorization(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    request = build_authorization_request(settings)
    redirect = approve(sandbox_reset, settings, request.state)
    sandbox_reset.control.advance_clock(31)
    with pytest.raises(ReauthorizationRequiredError, match="30 seconds"):
        await make_broker(settings).connect(redirect["code"], redirect["state"], request.state)


async def test_without_a_grant_the_error_says_how_to_connect(make_settings: Any) -> None:
    with pytest.raises(NotConnectedError, match="authorize-url"):
        await make_broker(make_settings(DEMO_PUBLIC)).get_token()


async def test_refresh_rotation_and_persistence_failure_fallback(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    clock = ManualClock()
    store = FlakyStore(settings.state_dir / "tokens")
    broker = make_broker(settings, store=store, clock=clock)
    await connect(sandbox_reset, broker, settings)
    first = await broker.get_token()
    codec_view = make_broker(settings)  # a second process reading the same store

    clock.advance(3599)
    sandbox_reset.control.advance_clock(3599)
    store.failures = 3  # every persist attempt of the refreshed grant fails
    with pytest.raises(TokenStoreError, match="previously stored refresh token"):
        await broker.get_token()
    # The rotated access token was not used and the stored grant is still the previous one.
    stored = await codec_view.status()
    assert stored is not None and stored.fingerprint == first.fingerprint

    # The store recovers: the previous refresh token (inside its 3-hour window) still works.
    second = await call_api(settings.base_url, broker, public_route(sandbox_reset))
    assert second.fingerprint != first.fingerprint
    stored = await codec_view.status()
    assert stored is not None and stored.fingerprint == second.fingerprint
    assert mints(sandbox_reset, DEMO_PUBLIC.client_id) == 3  # code exchange + two refreshes


async def test_a_grant_survives_secret_rotation_and_refreshes_with_the_new_secret(
    make_settings: Any, sandbox_reset: Any
) -> None:
    old = make_settings(DEMO_PUBLIC)
    clock = ManualClock()
    old_broker = make_broker(old, clock=clock)
    await connect(sandbox_reset, old_broker, old)
    first = await call_api(old.base_url, old_broker, public_route(sandbox_reset))
    new_secret = sandbox_reset.control.rotate_secret(DEMO_PUBLIC.client_id)

    # The customer's access token keeps working: rotation only affects new mints (spec §5.6).
    again = await call_api(old.base_url, old_broker, public_route(sandbox_reset))
    assert again.fingerprint == first.fingerprint

    clock.advance(3599)
    sandbox_reset.control.advance_clock(3599)
    with pytest.raises(InvalidClientError, match="COMPLIANCE_CLIENT_SECRET") as caught:
        await old_broker.get_token()  # a refresh with the old secret is refused...
    assert DEMO_PUBLIC.client_secret not in str(caught.value)
    assert (await old_broker.status()) is not None  # ...and the stored grant is kept

    new = make_settings(DEMO_PUBLIC, client_secret=new_secret)
    new_broker = make_broker(new, clock=clock)  # same store, same customer key
    second = await call_api(new.base_url, new_broker, public_route(sandbox_reset))
    assert second.fingerprint != first.fingerprint
    status = await new_broker.status()
    assert status is not None and status.fingerprint == second.fingerprint
    assert status.has_refresh_token
    assert mints(sandbox_reset, DEMO_PUBLIC.client_id) == 2  # the code exchange + one refresh
    assert sandbox_reset.control.stats()["unauthorized"] == 0


async def test_refresh_is_retried_through_a_token_endpoint_outage(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    clock = ManualClock()
    broker = make_broker(settings, clock=clock)
    await connect(sandbox_reset, broker, settings)
    clock.advance(3599)
    sandbox_reset.control.advance_clock(3599)
    sandbox_reset.control.token_outage(status=503, count=2)

    await call_api(settings.base_url, broker, public_route(sandbox_reset))

    stats = sandbox_reset.control.stats()
    # the code exchange, 2 failed refreshes and 1 good one
    assert stats["token_requests"][DEMO_PUBLIC.client_id] == 4
    assert stats["token_mints"][DEMO_PUBLIC.client_id] == 2


async def test_disconnect_cli_suspends_and_deletes(
    make_settings: Any, sandbox_reset: Any, monkeypatch: pytest.MonkeyPatch, fernet_key: str
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    broker = make_broker(settings)
    await connect(sandbox_reset, broker, settings)
    token = await call_api(settings.base_url, broker, public_route(sandbox_reset))
    for name, value in {
        "BASE_URL": settings.base_url,
        "CLIENT_ID": DEMO_PUBLIC.client_id,
        "CLIENT_SECRET": DEMO_PUBLIC.client_secret,
        "APPLICATION_TYPE": "integration_public",
        "SOURCE_ID": "acme",
        "REDIRECT_URI": PUBLIC_REDIRECT,
        "TOKEN_ENCRYPTION_KEY": fernet_key,
        "STATE_DIR": str(settings.state_dir),
    }.items():
        monkeypatch.setenv(f"COMPLIANCE_{name}", value)

    assert await asyncio.to_thread(cli_main, ["disconnect"]) == 0

    stats = sandbox_reset.control.stats()
    assert stats["route_counts"].get(SUSPEND_ROUTE) == 1
    left = await asyncio.to_thread(lambda: list((settings.state_dir / "tokens").glob("*.token")))
    assert not left
    assert await make_broker(settings).status() is None
    with pytest.raises(AssertionError, match="unauthorized"):
        await call_api(settings.base_url, _Fixed(token), public_route(sandbox_reset))
    assert (
        await asyncio.to_thread(cli_main, ["disconnect"]) == 0
    )  # idempotent: nothing left to disconnect


class _Fixed:
    """A provider that keeps handing out one token (to prove it was revoked)."""

    def __init__(self, token: Any) -> None:
        self.token = token

    async def get_token(self) -> Any:
        return self.token

    async def replace_token(self, failed: Any) -> Any:
        return self.token
