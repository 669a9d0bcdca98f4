"""An authorization code lives 30 s after the redirect (spec §5.6): ``connect`` never waits past
that on the token lock, the rate limiter or a 429's Retry-After. It fails at once, before the
code is sent, with an error that says to ask the customer to authorize again.

Each scenario runs under ``asyncio.wait_for``: a broker that waited instead of failing would
time the test out rather than hang it for a minute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from compliance_api.errors import CodeExchangeDeadlineError, InputError
from compliance_api.oauth import (
    CodeExchangeDeadline,
    OAuthClient,
    ReauthorizationRequiredError,
    build_authorization_request,
)
from compliance_api.settings import Settings
from sandbox.apps import DEMO_PUBLIC
from tests.fixtures.tokens import (
    ManualClock,
    SlidingWindowLimiter,
    approve,
    make_broker,
    token_requests,
)

GUARD_SECONDS = 5.0  # far below the waits the old code made (61 s limiter, 60 s Retry-After)


async def redirect_for(sandbox: Any, settings: Settings) -> tuple[str, str, str]:
    """``(code, state, expected_state)`` of a fresh consent, as the redirect brings them."""
    request = build_authorization_request(settings)
    redirect = approve(sandbox, settings, request.state)
    return redirect["code"], redirect["state"], request.state


def assert_asks_to_authorize_again(error: CodeExchangeDeadlineError, waiting_for: str) -> None:
    message = str(error)
    assert waiting_for in message
    assert "authorize" in message and "again" in message
    assert "secret-not-real" not in message


async def test_a_busy_rate_limiter_fails_at_once_without_a_token_call(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    limiter = SlidingWindowLimiter()
    for _ in range(5):
        await limiter.acquire()  # the budget is spent: the next slot is ~61 s away
    code, state, expected = await redirect_for(sandbox_reset, settings)
    broker = make_broker(settings, limiter=limiter)

    started = time.monotonic()
    with pytest.raises(CodeExchangeDeadlineError) as caught:
        await asyncio.wait_for(broker.connect(code, state, expected), GUARD_SECONDS)

    assert time.monotonic() - started < 1.0
    assert_asks_to_authorize_again(caught.value, "rate limit")
    assert token_requests(sandbox_reset, DEMO_PUBLIC.client_id) == 0
    assert await broker.status() is None


async def test_a_held_token_lock_is_waited_for_only_until_the_deadline(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    clock = ManualClock()
    broker = make_broker(settings, clock=clock)
    code, state, expected = await redirect_for(sandbox_reset, settings)
    arrived = clock() - timedelta(seconds=26)  # about a second left after the safety margin
    other = make_broker(settings)  # another process, busy under the lock

    async with other.lock.hold(other.key, wait_seconds=1):
        started = time.monotonic()
        with pytest.raises(CodeExchangeDeadlineError) as caught:
            await asyncio.wait_for(
                broker.connect(code, state, expected, received_at=arrived), GUARD_SECONDS
            )
        waited = time.monotonic() - started

    assert waited < 2.5  # the lock timeout is 180 s; the deadline cut it short
    assert_asks_to_authorize_again(caught.value, "token lock")
    assert token_requests(sandbox_reset, DEMO_PUBLIC.client_id) == 0


async def test_a_retry_after_past_the_deadline_fails_at_once(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    oauth = OAuthClient(settings)
    for _ in range(5):  # another machine spent the application's budget at the service
        with pytest.raises(ReauthorizationRequiredError):
            await oauth.refresh(SecretStr("not-a-refresh-token"))
    code, state, expected = await redirect_for(sandbox_reset, settings)
    broker = make_broker(settings)  # its own limiter is empty: the service answers 429

    started = time.monotonic()
    with pytest.raises(CodeExchangeDeadlineError) as caught:
        await asyncio.wait_for(broker.connect(code, state, expected), GUARD_SECONDS)

    assert time.monotonic() - started < 1.0
    assert_asks_to_authorize_again(caught.value, "Retry-After")
    assert token_requests(sandbox_reset, DEMO_PUBLIC.client_id) == 6  # 5 spent + the one 429


async def test_a_redirect_older_than_the_deadline_sends_nothing(
    make_settings: Any, sandbox_reset: Any
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    code, state, expected = await redirect_for(sandbox_reset, settings)
    broker = make_broker(settings)
    arrived = broker_now() - timedelta(seconds=28)  # inside 30 s, but not inside the margin

    with pytest.raises(CodeExchangeDeadlineError) as caught:
        await asyncio.wait_for(
            broker.connect(code, state, expected, received_at=arrived), GUARD_SECONDS
        )

    assert_asks_to_authorize_again(caught.value, "30 s")
    assert token_requests(sandbox_reset, DEMO_PUBLIC.client_id) == 0


async def test_a_recent_redirect_is_exchanged(make_settings: Any, sandbox_reset: Any) -> None:
    settings = make_settings(DEMO_PUBLIC)
    code, state, expected = await redirect_for(sandbox_reset, settings)
    broker = make_broker(settings)
    arrived = broker_now() - timedelta(seconds=10)
    token = await broker.connect(code, state, expected, received_at=arrived)
    status = await broker.status()
    assert status is not None and status.fingerprint == token.fingerprint
    assert token_requests(sandbox_reset, DEMO_PUBLIC.client_id) == 1


@pytest.mark.parametrize(
    ("when", "problem"),
    [
        (lambda: datetime(2026, 1, 2, 3, 4, 5), "timezone"),
        # taken when the test runs: a value from collection time may be past by then
        (lambda: datetime.now().astimezone() + timedelta(minutes=5), "future"),
        (lambda: "just now", "datetime"),
    ],
)
async def test_a_bad_received_at_is_refused_before_any_request(
    make_settings: Any, sandbox_reset: Any, when: Callable[[], Any], problem: str
) -> None:
    received_at = when()
    settings = make_settings(DEMO_PUBLIC)
    code, state, expected = await redirect_for(sandbox_reset, settings)
    with pytest.raises(InputError, match=problem) as caught:
        await make_broker(settings).connect(code, state, expected, received_at=received_at)
    assert caught.value.field == "received_at"
    assert token_requests(sandbox_reset, DEMO_PUBLIC.client_id) == 0


async def test_exchange_code_sends_nothing_past_the_deadline_and_bounds_its_timeout(
    make_settings: Any,
) -> None:
    settings = make_settings(DEMO_PUBLIC)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"access_token": "a", "refresh_token": "r"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        oauth = OAuthClient(settings, http=http)
        expired = CodeExchangeDeadline.after_redirect(broker_now() - timedelta(seconds=40))
        with pytest.raises(CodeExchangeDeadlineError):
            await oauth.exchange_code("code", "s", "s", deadline=expired)
        assert seen == []

        fresh = CodeExchangeDeadline.after_redirect(broker_now() - timedelta(seconds=20))
        await oauth.exchange_code("code", "s", "s", deadline=fresh)
        (request,) = seen
        timeout = request.extensions["timeout"]
        assert 0 < timeout["read"] <= 10 and 0 < timeout["connect"] <= 10


def broker_now() -> datetime:
    """Now, as the brokers of these tests read it (their default clock)."""
    return ManualClock()()
