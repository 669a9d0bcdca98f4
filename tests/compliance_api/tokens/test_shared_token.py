"""The broker against the sandbox: one mint however many ask, CAS on 401, renewal, rotation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from compliance_api.errors import InvalidClientError, InvalidScopeError
from compliance_api.oauth import OAuthClient
from compliance_api.tokens import CustomerKey, LocalFileTokenStore
from sandbox.apps import DEMO_GOV_MANAGE, DEMO_MANAGE
from tests.fixtures.tokens import ManualClock, call_api, make_broker, mints


async def test_concurrent_callers_of_two_brokers_cause_one_mint(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings()
    first, second = make_broker(settings), make_broker(settings)  # two "processes"
    tokens = await asyncio.gather(*(b.get_token() for b in [first, second] * 10))
    assert len({token.fingerprint for token in tokens}) == 1
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 1


async def test_revoked_token_while_twenty_runs_are_busy_is_replaced_once(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings()
    brokers = [make_broker(settings) for _ in range(4)]
    await asyncio.gather(*(call_api(settings.base_url, b) for b in brokers))
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 1

    sandbox_reset.control.revoke(DEMO_MANAGE.client_id)  # as if someone else minted
    results = await asyncio.gather(
        *(call_api(settings.base_url, brokers[i % 4]) for i in range(20))
    )

    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 2  # the first one, and exactly one more
    assert len({token.fingerprint for token in results}) == 1
    assert 1 <= sandbox_reset.control.stats()["unauthorized"] <= 20


async def test_token_is_renewed_before_expiry_without_a_failed_call(
    make_settings: Any, sandbox_reset: Any
) -> None:
    clock = ManualClock()
    settings = make_settings()
    broker = make_broker(settings, clock=clock)
    first = await call_api(settings.base_url, broker)

    clock.advance(3599 - 240)  # inside the 5-minute renewal margin, still valid at the service
    sandbox_reset.control.advance_clock(3599 - 240)
    second = await call_api(settings.base_url, broker)
    clock.advance(600)  # the first token is now dead at the service; the new one is used
    sandbox_reset.control.advance_clock(600)
    third = await call_api(settings.base_url, broker)

    assert first.fingerprint != second.fingerprint == third.fingerprint
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 2
    assert sandbox_reset.control.stats()["unauthorized"] == 0


async def test_margin_is_configurable(make_settings: Any, sandbox_reset: Any) -> None:
    clock = ManualClock()
    settings = make_settings(token_renewal_margin_seconds=60)
    broker = make_broker(settings, clock=clock)
    first = await broker.get_token()
    clock.advance(3599 - 120)  # outside a 60 s margin: keep the token
    assert (await broker.get_token()).fingerprint == first.fingerprint
    clock.advance(90)
    assert (await broker.get_token()).fingerprint != first.fingerprint
    assert mints(sandbox_reset, DEMO_MANAGE.client_id) == 2


async def test_secret_rotation_names_the_setting_and_discards_old_tokens(
    make_settings: Any, sandbox_reset: Any
) -> None:
    old = make_settings()
    broker = make_broker(old)
    stale = await call_api(old.base_url, broker)
    new_secret = sandbox_reset.control.rotate_secret(DEMO_MANAGE.client_id)

    with pytest.raises(InvalidClientError, match="COMPLIANCE_CLIENT_SECRET") as caught:
        await broker.replace_token(stale)
    assert DEMO_MANAGE.client_secret not in str(caught.value)

    rotated = make_broker(make_settings(client_secret=new_secret))
    before = sandbox_reset.control.stats()["unauthorized"]
    fresh = await call_api(old.base_url, rotated)
    assert fresh.fingerprint != stale.fingerprint
    # The record minted with the old secret was discarded, not tried first.
    assert sandbox_reset.control.stats()["unauthorized"] == before


async def test_invalid_scope_is_reported_with_the_setting(make_settings: Any) -> None:
    settings = make_settings().model_copy(update={"scopes": ["auditor-api.audit:read"]})
    with pytest.raises(InvalidScopeError, match="COMPLIANCE_SCOPES"):
        await OAuthClient(settings).client_credentials()


async def test_gov_tier_tokens_are_stored_and_used_per_tier(
    make_settings: Any, sandbox_reset: Any
) -> None:
    commercial, gov = make_settings(), make_settings(DEMO_GOV_MANAGE)
    assert gov.api_base_url == sandbox_reset.gov_url
    commercial_token = await call_api(commercial.base_url, make_broker(commercial))
    gov_token = await call_api(gov.api_base_url, make_broker(gov))

    store = LocalFileTokenStore(commercial.state_dir / "tokens")
    assert len(list(store.directory.iterdir())) == 2
    assert commercial_token.fingerprint != gov_token.fingerprint
    # Same client_id in both tiers would still be two records.
    assert CustomerKey("gov", "x").slug != CustomerKey("commercial", "x").slug
    # The gov app cannot mint on the commercial tier: nothing ever crossed over.
    commercial_stats = sandbox_reset.control.stats()
    gov_stats = sandbox_reset.gov_control.stats()
    assert commercial_stats["token_mints"] == {DEMO_MANAGE.client_id: 1}
    assert gov_stats["token_mints"] == {DEMO_GOV_MANAGE.client_id: 1}
    assert commercial_stats["unauthorized"] == gov_stats["unauthorized"] == 0
