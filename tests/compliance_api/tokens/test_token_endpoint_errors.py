"""The token endpoint's failures are mapped as the data routes' are (``http_errors``): a request
that never left says so, a Retry-After may be an HTTP date, and whatever the server says back is
redacted and capped. Its OAuth codes keep their own exceptions and hints.

No sandbox: ``httpx.MockTransport`` answers exactly what each case needs.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import time
import traceback
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from compliance_api.errors import (
    APIError,
    InvalidClientError,
    InvalidRequestError,
    InvalidScopeError,
    RateLimitedError,
    TransportError,
)
from compliance_api.http_errors import MAX_MESSAGE_LENGTH
from compliance_api.oauth import OAuthClient, ReauthorizationRequiredError
from compliance_api.settings import Settings
from sandbox.apps import DEMO_MANAGE, DEMO_PUBLIC
from tests.fixtures.tokens import PUBLIC_REDIRECT, make_broker

CLIENT_SECRET = DEMO_PUBLIC.client_secret
CODE = "auth-code-secret-0123456789"
REFRESH_TOKEN = "refresh-token-secret-0123456789"
ACCESS_TOKEN = "access-token-secret-0123456789"
GRANT = {"access_token": "new-access", "refresh_token": "new-refresh", "expires_in": 3599}

Reply = Callable[[httpx.Request], httpx.Response]


def make_settings(tmp_path: Path, client_id: str, **public: str) -> Settings:
    return Settings(
        base_url="http://token.test",
        client_id=client_id,
        client_secret=f"{client_id}-secret-not-real",
        token_encryption_key=Fernet.generate_key().decode(),
        state_dir=tmp_path / "state",
        **public,
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """A public integration's: it uses every grant."""
    return make_settings(
        tmp_path,
        DEMO_PUBLIC.client_id,
        application_type="integration_public",
        source_id="acme",
        redirect_uri=PUBLIC_REDIRECT,
    )


class Endpoint:
    """The token endpoint's answers, in order (an exception is raised by the transport)."""

    def __init__(self) -> None:
        self.replies: list[httpx.Response | Exception | Reply] = []
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply if isinstance(reply, httpx.Response) else reply(request)


@pytest.fixture
def endpoint() -> Endpoint:
    return Endpoint()


@pytest.fixture
async def oauth(settings: Settings, endpoint: Endpoint) -> AsyncIterator[OAuthClient]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(endpoint.handle)) as http:
        yield OAuthClient(settings, http=http)


async def call(oauth: OAuthClient, grant: str) -> Any:
    """One call of the token endpoint, each carrying its own secrets in the body."""
    if grant == "client_credentials":
        return await oauth.client_credentials()
    if grant == "exchange_code":
        return await oauth.exchange_code(CODE, "state", "state")
    if grant == "refresh":
        return await oauth.refresh(SecretStr(REFRESH_TOKEN))
    return await oauth.suspend(SecretStr(ACCESS_TOKEN))


GRANTS = ["client_credentials", "exchange_code", "refresh", "suspend"]
SECRETS = (CLIENT_SECRET, CODE, REFRESH_TOKEN, ACCESS_TOKEN)


def assert_no_secret(exc: BaseException) -> None:
    """No secret in the error, nor in any error it chains to; no httpx object on the way."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None:
        chain.append(current)
        current = current.__cause__ or current.__context__
    assert not any(isinstance(error, httpx.HTTPError) for error in chain)
    for error in chain:
        shown = "".join(traceback.format_exception(error)) + repr(vars(error)) + str(error.args)
        pickled = pickle.dumps(error)
        for secret in SECRETS:
            assert secret not in shown and secret.encode() not in pickled


# ---------------------------------------------------------------------------------------------
# Never sent: safe to resend
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "sent"),
    [
        (httpx.PoolTimeout("no free connection"), False),
        (httpx.ConnectError("refused"), False),
        (httpx.ConnectTimeout("syn"), False),
        (httpx.ReadTimeout("no answer"), True),
        (httpx.RemoteProtocolError("closed mid-response"), True),
    ],
)
async def test_a_mint_that_provably_never_left_says_so(
    oauth: OAuthClient, endpoint: Endpoint, failure: Exception, sent: bool
) -> None:
    endpoint.replies.append(failure)
    with pytest.raises(TransportError) as caught:
        await oauth.client_credentials()
    assert caught.value.request_sent is sent
    assert caught.value.operation == "mint token (client_credentials)"
    assert type(failure).__name__ in caught.value.message
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert_no_secret(caught.value)


# ---------------------------------------------------------------------------------------------
# Retry-After as delta-seconds or as an HTTP date
# ---------------------------------------------------------------------------------------------


def http_date(seconds_from_now: float) -> str:
    moment = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=seconds_from_now)
    return format_datetime(moment, usegmt=True)


@pytest.mark.parametrize(
    ("header", "low", "high"),
    [("30", 30, 30), ("in 30 s", 25, 30), ("0", 0, 0), ("soon", None, None)],
)
async def test_retry_after_of_the_token_endpoint_is_read_in_both_forms(
    oauth: OAuthClient,
    endpoint: Endpoint,
    header: str,
    low: float | None,
    high: float | None,
) -> None:
    value = http_date(30) if header == "in 30 s" else header
    endpoint.replies.append(
        httpx.Response(429, json={"error": "rate_limited"}, headers={"Retry-After": value})
    )
    with pytest.raises(RateLimitedError) as caught:
        await oauth.client_credentials()
    retry_after = caught.value.retry_after
    if low is None:
        assert retry_after is None  # unusable: the broker waits the whole window instead
    else:
        assert retry_after is not None and low <= retry_after <= high


async def test_the_broker_waits_until_the_http_date_a_429_names_then_mints(
    tmp_path: Path, endpoint: Endpoint
) -> None:
    """Unread, the date would have meant the broker's default wait of a whole minute."""
    endpoint.replies.append(lambda _: httpx.Response(429, headers={"Retry-After": http_date(2)}))
    endpoint.replies.append(httpx.Response(200, json=GRANT))
    settings = make_settings(tmp_path, DEMO_MANAGE.client_id)
    broker = make_broker(settings)

    started = time.monotonic()
    async with httpx.AsyncClient(transport=httpx.MockTransport(endpoint.handle)) as http:
        broker.oauth = OAuthClient(settings, http=http)
        token = await asyncio.wait_for(broker.get_token(), 10)

    assert time.monotonic() - started >= 0.9  # the date is 1-2 s ahead when it is read
    assert token.value.get_secret_value() == "new-access"
    assert len(endpoint.requests) == 2


# ---------------------------------------------------------------------------------------------
# What the server says back: redacted, capped; OAuth codes keep their exceptions and hints
# ---------------------------------------------------------------------------------------------


def echo(status: int, code: str) -> Reply:
    """An error whose description repeats every value the request sent, secrets included."""

    def reply(request: httpx.Request) -> httpx.Response:
        sent = " ".join(str(value) for value in json.loads(request.content).values())
        return httpx.Response(
            status, json={"error": f"{code}", "error_description": f"rejected: {sent}"}
        )

    return reply


@pytest.mark.parametrize("grant", GRANTS)
async def test_secrets_the_token_endpoint_echoes_are_redacted(
    oauth: OAuthClient, endpoint: Endpoint, grant: str
) -> None:
    endpoint.replies.append(echo(400, "invalid_grant"))
    with pytest.raises(APIError) as caught:
        await call(oauth, grant)
    if grant in ("exchange_code", "refresh"):  # the grant is gone: authorize again
        assert isinstance(caught.value, ReauthorizationRequiredError)
    else:
        assert isinstance(caught.value, InvalidRequestError)
    assert "[redacted]" in caught.value.message
    assert DEMO_PUBLIC.client_id in caught.value.message  # not a secret: left as the server said it
    assert_no_secret(caught.value)


async def test_a_secret_in_the_error_code_is_redacted_too(
    oauth: OAuthClient, endpoint: Endpoint
) -> None:
    endpoint.replies.append(
        httpx.Response(401, json={"error": f"bad secret {CLIENT_SECRET}", "message": "no"})
    )
    with pytest.raises(APIError) as caught:
        await oauth.client_credentials()
    assert caught.value.code == "bad secret [redacted]"
    assert_no_secret(caught.value)


@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(
            400,
            json={
                "error": "invalid_request",
                "error_description": CLIENT_SECRET + "x" * 100_000 + CLIENT_SECRET,
            },
        ),
        httpx.Response(503, text=("overloaded " * 100_000) + CLIENT_SECRET),
    ],
)
async def test_a_huge_error_body_is_capped(
    oauth: OAuthClient, endpoint: Endpoint, reply: httpx.Response
) -> None:
    endpoint.replies.append(reply)
    with pytest.raises(APIError) as caught:
        await oauth.client_credentials()
    assert 0 < len(caught.value.message) <= MAX_MESSAGE_LENGTH
    assert len(str(caught.value)) < MAX_MESSAGE_LENGTH + 100
    assert_no_secret(caught.value)


@pytest.mark.parametrize(
    ("status", "code", "error_class", "hint"),
    [
        (401, "invalid_client", InvalidClientError, "COMPLIANCE_CLIENT_SECRET"),
        (400, "invalid_client", InvalidClientError, "COMPLIANCE_CLIENT_SECRET"),  # RFC 6749
        (400, "invalid_scope", InvalidScopeError, "COMPLIANCE_SCOPES"),
    ],
)
async def test_oauth_codes_keep_their_exception_and_hint_even_when_capped(
    oauth: OAuthClient,
    endpoint: Endpoint,
    status: int,
    code: str,
    error_class: type[APIError],
    hint: str,
) -> None:
    description = f"{CLIENT_SECRET} " + "y" * 10_000
    endpoint.replies.append(
        httpx.Response(status, json={"error": code, "error_description": description})
    )
    with pytest.raises(error_class) as caught:
        await oauth.client_credentials()
    message = caught.value.message
    assert caught.value.code == code and caught.value.status_code == status
    assert message.startswith("[redacted] yyy") and hint in message
    assert len(message.split(". ", 1)[0]) == MAX_MESSAGE_LENGTH  # the server's part is capped
    assert_no_secret(caught.value)
